"""One image generation: the request's defaults resolved, then the pipeline run with a
step-end callback that reports progress and can stop it (imagegen.generation.jobs runs these)."""

import secrets
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from imagegen.generation.images import GenerationParameters
from imagegen.model.pipeline import native_size

SEED_MAX = 2**32 - 1


class GenerationRequest(BaseModel):
    """What a client asked for, in any protocol; a job reports it with the model-independent
    defaults filled in (steps, guidance, seed), so a job shows its seed from the start."""

    model_config = ConfigDict(frozen=True)

    prompt: str
    negative_prompt: str | None = None
    steps: int | None = None
    guidance: float | None = None
    size: tuple[int, int] | None = Field(default=None, description="null: the model's native size")
    seed: int | None = None
    force_cpu: bool = False


class Cancelled(Exception):
    """Raised from the step-end callback to stop a generation between two steps."""


def with_defaults(
    request: GenerationRequest, *, default_steps: int, default_guidance: float
) -> GenerationRequest:
    """Fills what does not depend on the model, so a job reports its seed from the start."""
    return request.model_copy(
        update={
            "steps": request.steps or default_steps,
            "guidance": default_guidance if request.guidance is None else request.guidance,
            "seed": secrets.randbelow(SEED_MAX + 1) if request.seed is None else request.seed,
        }
    )


def resolve(
    pipe: Any, request: GenerationRequest, *, model_id: str, revision: str | None
) -> GenerationParameters:
    width, height = request.size or native_size(pipe)
    return GenerationParameters(
        prompt=request.prompt,
        negative_prompt=request.negative_prompt,
        steps=request.steps,
        guidance=request.guidance,
        width=width,
        height=height,
        seed=request.seed,
        scheduler=type(pipe.scheduler).__name__,
        model_id=model_id,
        revision=revision,
    )


def render(
    pipe: Any,
    parameters: GenerationParameters,
    *,
    device: str,
    home: str,
    on_step: Callable[[int, int], None],
):
    """Runs the pipeline on `device` (force_cpu on an accelerator host: the CPU, and back to
    `home` afterwards). `on_step(done, total)` runs after each denoising step and may raise
    Cancelled; `total` is the scheduler's real count (PNDM, for one, adds warm-up steps)."""
    import torch

    def step_end(pipe_: Any, index: int, _timestep: Any, tensors: dict) -> dict:
        on_step(index + 1, getattr(pipe_, "num_timesteps", parameters.steps))
        return tensors

    try:
        if device != home:
            pipe.to(device)
        with torch.inference_mode():
            return pipe(
                prompt=parameters.prompt,
                negative_prompt=parameters.negative_prompt,
                num_inference_steps=parameters.steps,
                guidance_scale=parameters.guidance,
                width=parameters.width,
                height=parameters.height,
                # A CPU generator gives the same image for a seed on every device.
                generator=torch.Generator("cpu").manual_seed(parameters.seed),
                callback_on_step_end=step_end,
            ).images[0]
    finally:
        if device != home:
            pipe.to(home)
