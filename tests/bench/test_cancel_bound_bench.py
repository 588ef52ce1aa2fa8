"""bench/cancel_bound_bench.py finds the longest stretch between two stop points, and the
baselines beside it, on the tiny pipeline in this process: one part of the UNet and one of
the decoder made slow on purpose must come out as the longest stretches, named by the part
that starts them, inside calls and tiles that take at least as long. Without its hooks on the
stop points the bench would report the whole call as the stretch, and docs/image-api.md's
cancel bound would be the step's length."""

import time
from pathlib import Path

import pytest
import torch

from bench.cancel_bound_bench import (
    Stamps,
    bounds,
    measure_decode,
    measure_unet_call,
    unet_inputs,
)
from imagegen.generation.stop_points import stoppable_modules
from imagegen.model.pipeline import LoadOptions, load_pipeline
from tests.support.model_service import SD_REPO

SLOW = 0.3  # seconds the slowed parts sleep
SIDE = 64  # the tiny model's native size: in tiles of 32 pixels, nine tiles


@pytest.fixture(scope="module")
def pipe(hub_root: Path):
    loaded = load_pipeline(
        hub_root / SD_REPO, variant="fp16", device="cpu", options=LoadOptions(vae_tile=32)
    )
    # A leaf inside a stoppable part sleeps: the stretch from that part's stop point to the
    # next one holds the sleep.
    for resnet in (loaded.unet.down_blocks[0].resnets[0], loaded.vae.decoder.mid_block.resnets[0]):
        resnet.conv1.register_forward_pre_hook(lambda *_: time.sleep(SLOW))
    return loaded


def test_the_longest_stretch_of_a_unet_call_is_the_slow_part(pipe):
    stamps = Stamps(pipe)
    try:
        call = measure_unet_call(pipe, stamps, batch=2, side=SIDE, seed=0)
    finally:
        stamps.close()
    longest = call.longest_stretch
    assert longest.after == "unet.down_blocks.0.resnets.0"
    assert SLOW <= longest.seconds < call.seconds
    assert call.longest[1].seconds < SLOW  # the other stretches are the tiny model's own
    unet_points = [m for m in stoppable_modules(pipe) if any(m is u for u in pipe.unet.modules())]
    assert call.points == len(unet_points)  # each part of the blocks, once a call


def test_the_decode_reports_each_tile_and_its_longest_stretch(pipe):
    stamps = Stamps(pipe)
    try:
        decode = measure_decode(pipe, stamps, side=SIDE, seed=0)
    finally:
        stamps.close()
    assert len(decode.tiles) == 9
    assert all(tile >= SLOW for tile in decode.tiles)  # each tile passes the slow part once
    assert decode.seconds >= sum(decode.tiles)
    assert decode.longest_stretch.after == "vae.decoder.mid_block.resnets.0"
    assert SLOW <= decode.longest_stretch.seconds < max(decode.tiles)


def test_the_bounds_are_the_longest_stretches_and_the_whole_parts(pipe):
    stamps = Stamps(pipe)
    try:
        calls = [measure_unet_call(pipe, stamps, batch=2, side=SIDE, seed=s) for s in (0, 1)]
        decode = measure_decode(pipe, stamps, side=SIDE, seed=0)
    finally:
        stamps.close()
    found = bounds(calls, decode)
    assert found["unet_call_whole"] == max(c.seconds for c in calls)
    assert found["tile_whole"] == max(decode.tiles)
    assert found["decode_whole"] == decode.seconds
    assert found["in_process"] == max(
        found["unet_stretch"]["seconds"], found["decode_stretch"]["seconds"]
    )
    assert found["distributed"] == found["in_process"] + 1.0  # the worker's heartbeat


def test_closed_stamps_leave_the_pipeline_as_it_was(pipe):
    stamps = Stamps(pipe)
    measure_unet_call(pipe, stamps, batch=1, side=SIDE, seed=0)
    stamps.close()
    stamps.marks.clear()
    with torch.inference_mode():
        pipe.unet(**unet_inputs(pipe.unet, batch=1, side=SIDE, scale=8, seed=0))
    assert stamps.marks == []
