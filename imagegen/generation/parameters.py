"""A request resolved into what runs: defaults, caps and a seed, then the pipeline's parameters.

Every protocol meets the same resolution, so the record says exactly what was produced. An edit
runs max(1, int(steps x strength)) steps, as diffusers and A1111 do."""

import secrets
from typing import Any

from imagegen.generation.hires import steps_run as hires_steps_run
from imagegen.generation.images import GenerationParameters, LoraRan
from imagegen.generation.presets import GenerationRules, preset_named
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
    """The request as it will run, with defaults, caps and a seed, known at submission.

    The defaults follow the configured model, not the loaded pipeline, or the recipe of a
    few-step LoRA the request runs (the first, at a weight above 0). An upscale has no
    steps, guidance or seed: it runs as sent."""
    if request.upscale is not None:
        return request
    recipe = next((u.preset for u in request.loras if u.preset and u.weight > 0), None)
    if recipe is not None and (preset := preset_named(recipe)) is not None:
        rules = rules.under(preset)
    steps, guidance, scheduler, adjusted = rules.settle(
        steps=request.steps, guidance=request.guidance, scheduler=request.scheduler,
        quality=request.quality,
    )  # fmt: skip
    return request.model_copy(
        update={
            "steps": steps,
            "guidance": guidance,
            "scheduler": scheduler,
            "preset": rules.preset,
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
    """The parameters the job runs with.

    `inpaint_model` is the checkpoint whose UNet runs the edit; None when the base model's does."""
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
        lora_hashes=", ".join(f"{u.name}: {u.hash}" for u in request.loras) or None,
        loras=tuple(LoraRan(name=u.name, weight=u.weight) for u in request.loras),
        hires=None
        if request.hires is None
        else request.hires.model_copy(update={"steps": request.hires.steps or steps}),
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
    """An edit runs fewer steps (strength); a hires fix adds its second pass's; anything else
    runs those asked."""
    if (hires := parameters.hires) is not None:
        return parameters.steps + hires_steps_run(hires.steps, hires.denoising_strength)
    return parameters.steps if parameters.edit is None else parameters.edit.steps_run


def working_size(size: tuple[int, int], *, low: int, high: int) -> tuple[int, int]:
    """Each side rounded down to a multiple of 8, then kept within `low`..`high`."""
    width, height = (min(high, max(low, side - side % 8)) for side in size)
    return width, height
