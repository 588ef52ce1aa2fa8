"""Guidance-free steps on the service's own path: at guidance <= 1 diffusers runs no
unconditional pass, so each step is one UNet call with a batch of 1 instead of 2 (half the
work). Checked on the real tiny SD and SDXL pipelines as the service loads them (its sliced
attention processor) and runs them (its callbacks, its scheduler swap), by a forward hook on
the real UNet recording each call's batch size; bench/time_to_image_bench.py measures the
step time it saves at full size."""

import pytest

from imagegen.backend import rules_from_settings
from imagegen.generation.images import GenerationParameters
from imagegen.generation.parameters import resolve, with_defaults
from imagegen.generation.render import render
from imagegen.generation.requests import GenerationRequest
from imagegen.model.attention import SlicedSdpaProcessor
from imagegen.model.pipeline import load_pipeline
from tests.support.model_service import SD_REPO, SDXL_REPO


@pytest.fixture(scope="module", params=["sd", "sdxl"])
def pipe(request, hub_root):
    repo = {"sd": SD_REPO, "sdxl": SDXL_REPO}[request.param]
    loaded = load_pipeline(hub_root / repo, variant="fp16", device="cpu")
    processors = {type(p) for p in loaded.unet.attn_processors.values()}
    assert processors == {SlicedSdpaProcessor}  # the service's processor, not diffusers'
    return loaded


def unet_batches(pipe, parameters: GenerationParameters, scheduler: str | None) -> list[int]:
    """The batch size of every UNet call of one generation through the service's render."""
    batches = []
    hook = pipe.unet.register_forward_pre_hook(
        lambda _module, args, kwargs: batches.append(
            (args[0] if args else kwargs["sample"]).shape[0]
        ),
        with_kwargs=True,
    )
    try:
        render(
            pipe, parameters, scheduler=scheduler, device="cpu", home="cpu",
            on_step=lambda done, total: None,
            stop_requested=lambda: False,
        )  # fmt: skip
    finally:
        hook.remove()
    return batches


def parameters(guidance: float, scheduler: str = "euler_trailing") -> GenerationParameters:
    return GenerationParameters(
        prompt="a fox", negative_prompt="blurry", steps=3, guidance=guidance, width=64,
        height=64, seed=3, scheduler=scheduler, model_id=SD_REPO, revision=None,
    )  # fmt: skip


@pytest.mark.parametrize(("guidance", "batch"), [(0.0, 1), (0.5, 1), (1.0, 1), (1.01, 2), (7.0, 2)])
def test_guidance_at_or_below_one_runs_one_unet_batch_of_one_per_step(pipe, guidance, batch):
    assert unet_batches(pipe, parameters(guidance), "euler_trailing") == [batch] * 3


@pytest.mark.parametrize("scheduler", ["lcm", "tcd", "ddim_trailing", "euler_a_trailing"])
def test_the_few_step_schedulers_keep_it(pipe, scheduler):
    assert unet_batches(pipe, parameters(0.0, scheduler), scheduler) == [1] * 3


def test_the_model_following_defaults_take_the_guidance_free_path(pipe, settings):
    """An app pointed at SDXL-Turbo, sent only a prompt: one call of batch 1 (its 1 step)."""
    settings.MODEL_ID, settings.MODEL_ADAPTERS = "stabilityai/sdxl-turbo", ()
    request = with_defaults(
        GenerationRequest(prompt="a fox", size=(64, 64)), rules=rules_from_settings()
    )
    resolved = resolve(pipe, request, model_id="stabilityai/sdxl-turbo", revision=None)
    assert (resolved.steps, resolved.guidance) == (1, 0.0)
    assert (request.scheduler, resolved.scheduler) == ("euler_a_trailing", "Euler a SGM Uniform")
    assert unet_batches(pipe, resolved, request.scheduler) == [1]
