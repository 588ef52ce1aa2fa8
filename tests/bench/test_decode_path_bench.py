"""bench/decode_path_bench.py compares the service's decode path with plain diffusers': its
service side must be what the service builds (the service's loader, VAE_TILE_SIZE's tiles,
the stop points watched) and its plain side diffusers' own, in the same tiles, or the
comparison answers nothing. On the tests' tiny SD pipeline (its own tile: 64 pixels)."""

import os
import threading
from pathlib import Path

import pytest
import torch

from bench.decode_path_bench import GenerationThread, build_vaes, decode_once, summarise
from bench.efficiency import Peak
from tests.support.model_service import SD_REPO


def storages(vae) -> set[int]:
    return {p.untyped_storage().data_ptr() for p in vae.parameters()}


def test_each_side_is_built_as_its_code_builds_it_and_decodes_the_same_pixels(hub_root):
    vaes = build_vaes(Path(hub_root) / SD_REPO, "fp16", 32)
    assert {name: vae.tile_sample_min_size for name, vae in vaes.items()} == {
        "plain": 32, "service": 32, "service_256": 64,  # 256 > the tiny model's own 64
        "service_thread": 32,
    }  # fmt: skip
    assert not hasattr(vaes["plain"], "_bench_points")
    for name in ("service", "service_256"):
        assert vaes[name]._bench_points.modules  # the decoder's stop points
        assert len(storages(vaes[name])) == 1  # the service's loader: views into one block
    assert len(storages(vaes["plain"])) > 1  # diffusers': a tensor each
    latents = torch.randn(1, 4, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        plain, service = (vaes[n].decode(latents).sample for n in ("plain", "service"))
    assert torch.equal(plain, service)
    timed = decode_once(vaes["service"], latents)
    assert timed["seconds"] > 0 and timed["cpu"] > 0 and timed["peak_above_bytes"] >= 0
    assert timed["thread"] == "MainThread"
    assert timed["process_minflt"] >= timed["thread_minflt"] >= 0


def test_the_thread_variant_decodes_the_same_vae_on_a_thread_started_as_the_services(hub_root):
    """service_thread answers "is it the thread?" only if its decode runs off the main thread,
    on one long-lived thread that lowered its own priority first, as the service's does."""
    vaes = build_vaes(Path(hub_root) / SD_REPO, "fp16", 32)
    assert vaes["service_thread"] is vaes["service"]
    generation = GenerationThread(nice=3)
    here = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    def where() -> tuple[str, int, int]:
        native = threading.get_native_id()
        return threading.current_thread().name, native, os.getpriority(os.PRIO_PROCESS, native)

    name, native, nice = generation.run(where)
    assert (name, nice) == ("generation", min(19, here + 3))
    assert native != threading.get_native_id()
    assert generation.run(where)[1] == native  # the same thread each time, as the service's
    latents = torch.randn(1, 4, 32, 32, generator=torch.Generator().manual_seed(0))
    timed = generation.run(lambda: decode_once(vaes["service_thread"], latents))
    assert timed["thread"] == "generation" and timed["seconds"] > 0
    with pytest.raises(ZeroDivisionError):  # a failing decode fails the bench, not the thread
        generation.run(lambda: 1 / 0)
    assert generation.run(where)[0] == "generation"


def test_the_summary_takes_each_variants_best_against_the_measured_peak():
    decodes = {"plain": [{"seconds": 2.0, "cpu": 4.0, "peak_above_bytes": 10},
                         {"seconds": 1.0, "cpu": 2.0, "peak_above_bytes": 30}]}  # fmt: skip
    rows = summarise(decodes, {"plain": 50e9}, Peak(2, 100e9, 80e9, {}))
    assert rows["plain"]["best_seconds"] == 1.0 and rows["plain"]["best_cpu"] == 2.0
    assert rows["plain"]["median_seconds"] == 1.5 and rows["plain"]["peak_above_bytes"] == 30
    assert rows["plain"]["gflops"] == 50 and rows["plain"]["of_peak"] == 0.5
