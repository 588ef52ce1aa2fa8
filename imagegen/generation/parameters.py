"""A request resolved into what runs: the rules' defaults and caps (imagegen.generation.
presets) and a seed at submission (with_defaults), then the record's parameters against the
loaded pipeline (resolve), and the rules that decide how many steps an edit runs and at what
size.

Why a module of its own: every protocol's request meets the same resolution, in process or
on a worker, and the record says exactly what it produced.

The rules:
- strength s (0 < s <= 1) noises the image to that fraction of the schedule; of `steps`,
  max(1, int(steps x s)) denoising steps run (diffusers' and A1111's rule, at least one).
- an edit's working size is the one sent, else the input's with each side rounded down to a
  multiple of 8 and kept within GEN_MIN_SIDE..GEN_MAX_SIDE (working_size).
"""

import secrets
from typing import Any

from imagegen.generation.images import GenerationParameters
from imagegen.generation.presets import GenerationRules
from imagegen.generation.requests import (
    SEED_MAX,
    EditParameters,
    EditRequest,
    GenerationRequest,
    InpaintModel,
    InputLink,
)
from imagegen.generation.schedulers import sampler_ran
from imagegen.model.pipeline import native_size


def with_defaults(request: GenerationRequest, *, rules: GenerationRules) -> GenerationRequest:
    """The request as it will run: the rules' defaults and caps (which follow the configured
    model, not the loaded pipeline, so they are known at submission) and a seed, so a job
    reports all of them from the start."""
    steps, guidance, scheduler, adjusted = rules.settle(
        steps=request.steps, guidance=request.guidance, scheduler=request.scheduler
    )
    return request.model_copy(
        update={
            "steps": steps,
            "guidance": guidance,
            "scheduler": scheduler,
            "seed": secrets.randbelow(SEED_MAX + 1) if request.seed is None else request.seed,
            "adjusted": [*request.adjusted, *adjusted],
        }
    )


def resolve(
    pipe: Any,
    request: GenerationRequest,
    *,
    model_id: str,
    revision: str | None,
    inpaint_model: InpaintModel | None = None,
) -> GenerationParameters:
    """The parameters the job runs with; `inpaint_model`: the inpainting checkpoint whose
    UNet runs the edit, None when the base model's does."""
    steps, guidance, seed = request.steps, request.guidance, request.seed
    if steps is None or guidance is None or seed is None:
        raise ValueError("resolve takes a request with its defaults (with_defaults)")
    width, height = request.size or native_size(pipe)
    return GenerationParameters(
        prompt=request.prompt,
        negative_prompt=request.negative_prompt,
        steps=steps,
        guidance=guidance,
        width=width,
        height=height,
        seed=seed,
        # A1111's name for what runs: the chosen scheduler, else the model's own.
        scheduler=sampler_ran(pipe, request.scheduler),
        model_id=model_id,
        revision=revision,
        edit=None
        if request.edit is None
        else edit_parameters(request.edit, steps=steps, inpaint_model=inpaint_model),
    )


def edit_parameters(
    edit: EditRequest, *, steps: int, inpaint_model: InpaintModel | None = None
) -> EditParameters:
    return EditParameters(
        source=InputLink(sha256=edit.source, url=input_url(edit.source)),
        mask=None if edit.mask is None else InputLink(sha256=edit.mask, url=input_url(edit.mask)),
        strength=edit.strength,
        mask_blur=edit.mask_blur,
        steps_run=steps_run(steps, edit.strength),
        resize_mode=edit.resize_mode,
        only_masked=edit.only_masked,
        inpaint_model=inpaint_model,
    )


def input_url(sha256: str) -> str:
    return f"/images/inputs/{sha256}"


def steps_run(steps: int, strength: float) -> int:
    """The denoising steps an edit of `steps` at `strength` runs."""
    return max(1, int(steps * strength))


def steps_running(parameters: GenerationParameters) -> int:
    """The denoising steps the job runs: an edit's fewer (strength), else those asked."""
    return parameters.steps if parameters.edit is None else parameters.edit.steps_run


def working_size(size: tuple[int, int], *, low: int, high: int) -> tuple[int, int]:
    """The input's size as the model takes it: each side rounded down to a multiple of 8,
    then within `low`..`high`."""
    width, height = (min(high, max(low, side - side % 8)) for side in size)
    return width, height
