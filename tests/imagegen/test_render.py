"""One generation on the real tiny pipeline, in-process: force_cpu on an accelerator host, and
the stages it is timed by."""

import time

from imagegen.generation.images import GenerationParameters
from imagegen.generation.render import render
from imagegen.model.pipeline import load_pipeline
from tests.support.model_service import SD_REPO

PARAMETERS = GenerationParameters(
    prompt="a fox", negative_prompt=None, steps=2, guidance=5.0, width=64, height=64, seed=3,
    scheduler="PNDMScheduler", model_id=SD_REPO, revision=None,
)  # fmt: skip


def test_force_cpu_on_a_fake_accelerator_host_runs_on_the_cpu_and_moves_back(hub_root):
    """An accelerator cannot exist here: the pipeline's moves are recorded, and a move to
    the fake accelerator is recorded without being made."""
    pipe = load_pipeline(hub_root / SD_REPO, variant="fp16", device="cpu")
    moves, devices_during_steps = [], []
    real_to = pipe.to

    def recording_to(device):
        moves.append(device)
        return real_to(device) if device == "cpu" else pipe

    pipe.to = recording_to

    def on_step(done: int, total: int) -> None:
        devices_during_steps.append(next(pipe.unet.parameters()).device.type)

    rendered = render(pipe, PARAMETERS, device="cpu", home="cuda", on_step=on_step)
    assert moves == ["cpu", "cuda"]  # to the CPU for this generation, then home again
    assert devices_during_steps and set(devices_during_steps) == {"cpu"}
    assert rendered.image.size == (64, 64)


def test_without_force_cpu_the_pipeline_stays_where_it_is(hub_root):
    pipe = load_pipeline(hub_root / SD_REPO, variant="fp16", device="cpu")
    moves = []
    pipe.to = lambda device: moves.append(device) or pipe
    render(pipe, PARAMETERS, device="cpu", home="cpu", on_step=lambda done, total: None)
    assert moves == []


def test_the_stages_are_timed_in_order_and_the_unet_hook_is_removed(hub_root):
    pipe = load_pipeline(hub_root / SD_REPO, variant="fp16", device="cpu")
    calls_seen = []
    started = time.monotonic()
    rendered = render(
        pipe, PARAMETERS, device="cpu", home="cpu",
        on_step=lambda done, total: calls_seen.append(done),
    )  # fmt: skip
    elapsed = time.monotonic() - started
    stages = rendered.stages
    assert set(stages) == {"encode_seconds", "denoise_seconds", "decode_seconds"}
    assert all(seconds > 0 for seconds in stages.values())
    assert sum(stages.values()) <= elapsed
    assert not pipe.unet._forward_pre_hooks  # nothing left behind on the shared UNet
