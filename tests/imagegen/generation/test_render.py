"""One generation on the real tiny pipeline, in-process: force_cpu on an accelerator host, the
stages it is timed by, and progress counted in the steps asked for."""

import time

import pytest

from imagegen.generation.images import GenerationParameters
from imagegen.generation.render import asked_steps_done, render
from imagegen.model.pipeline import load_pipeline
from tests.support.model_service import SD_REPO

PARAMETERS = GenerationParameters(
    prompt="a fox", negative_prompt=None, steps=2, guidance=5.0, width=64, height=64, seed=3,
    scheduler="PLMS", model_id=SD_REPO, revision=None,
)  # fmt: skip


def never() -> bool:
    return False


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

    rendered = render(
        pipe, PARAMETERS, scheduler=None, device="cpu", home="cuda", on_step=on_step,
        stop_requested=never,
    )  # fmt: skip
    assert moves == ["cpu", "cuda"]  # to the CPU for this generation, then home again
    assert devices_during_steps and set(devices_during_steps) == {"cpu"}
    assert rendered.image.size == (64, 64)


def test_without_force_cpu_the_pipeline_stays_where_it_is(hub_root):
    pipe = load_pipeline(hub_root / SD_REPO, variant="fp16", device="cpu")
    moves = []
    pipe.to = lambda device: moves.append(device) or pipe
    render(
        pipe, PARAMETERS, scheduler=None, device="cpu", home="cpu",
        on_step=lambda done, total: None,
        stop_requested=never,
    )  # fmt: skip
    assert moves == []


def test_the_stages_are_timed_in_order_and_the_unet_hook_is_removed(hub_root):
    pipe = load_pipeline(hub_root / SD_REPO, variant="fp16", device="cpu")
    calls_seen = []
    started = time.monotonic()
    rendered = render(
        pipe, PARAMETERS, scheduler=None, device="cpu", home="cpu",
        on_step=lambda done, total: calls_seen.append(done),
        stop_requested=never,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    stages = rendered.stages
    assert set(stages) == {"encode_seconds", "denoise_seconds", "decode_seconds"}
    assert all(seconds > 0 for seconds in stages.values())
    assert sum(stages.values()) <= elapsed
    assert not pipe.unet._forward_pre_hooks  # nothing left behind on the shared UNet


@pytest.mark.parametrize(
    ("calls", "asked"), [(21, 20), (29, 20), (39, 20), (20, 20), (4, 8), (1, 1)]
)
def test_the_timesteps_a_scheduler_runs_count_as_the_steps_asked(calls, asked):
    """PNDM's warm-up (21 or 29 for 20), Heun's two calls a step (39), and fewer than asked:
    the count never goes back, and reaches the asked total at the last call, not before."""
    counted = [asked_steps_done(done, calls, asked) for done in range(1, calls + 1)]
    assert counted == sorted(counted) and counted[-1] == asked
    assert asked not in counted[:-1]
    if calls >= asked:  # one step more at a time: each step is reported
        assert sorted(set(counted) - {0}) == list(range(1, asked + 1))


def test_the_model_own_pndm_reports_the_steps_asked_for(hub_root):
    """The tiny SD's own scheduler (PNDM, as SD ships it) runs 6 timesteps for 5 steps; the
    callback is told 1 to 5, each once, of 5, and is still called at every timestep (where a
    cancel is seen)."""
    pipe = load_pipeline(hub_root / SD_REPO, variant="fp16", device="cpu")
    reported = []
    five = PARAMETERS.model_copy(update={"steps": 5})
    render(
        pipe, five, scheduler=None, device="cpu", home="cpu",
        on_step=lambda done, total: reported.append((done, total)),
        stop_requested=never,
    )  # fmt: skip
    assert pipe.num_timesteps == 6  # the warm-up: one more model call than steps
    assert len(reported) == 6 and {total for _, total in reported} == {5}
    steps = [done for done, _ in reported]
    assert steps == sorted(steps) and [s for s in dict.fromkeys(steps) if s] == [1, 2, 3, 4, 5]
    assert steps.count(5) == 1 and steps[-1] == 5
