"""One image generation: the pipeline run for resolved parameters.

Progress counts the steps asked for, whatever the scheduler makes of them. Two hooks time the
stages at no cost per step."""

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagegen.generation.edit_inputs import EditInputs
from imagegen.generation.hires_render import HiresRun
from imagegen.generation.images import GenerationParameters
from imagegen.generation.masks import blurred_mask, pasted_back
from imagegen.generation.parameters import steps_running
from imagegen.generation.prompt_tags import without_tags
from imagegen.generation.schedulers import scheduler_applied
from imagegen.generation.stop_points import stop_points
from imagegen.model import loras_applied, prompt_cache
from imagegen.model.edit_pipelines import edit_pipeline


class Cancelled(Exception):
    """Raised to stop a generation, from the step-end callback or a stop point."""


@dataclass(frozen=True)
class Rendered:
    image: Any  # a PIL image
    stages: dict[str, float]  # encode_seconds, denoise_seconds, decode_seconds
    # Each asked step's time, from the UNet's first call to its end (imagegen_step_seconds).
    step_seconds: tuple[float, ...] = ()


def asked_steps_done(calls_done: int, calls: int, asked: int) -> int:
    """The asked steps done after `calls_done` of `calls` timesteps, in proportion, rounded down.

    So the count never goes back and reaches `asked` at the last call, not before."""
    return asked if calls_done >= calls else calls_done * asked // calls


def render(
    pipe: Any,
    parameters: GenerationParameters,
    *,
    scheduler: str | None,
    device: str,
    home: str,
    on_step: Callable[[int, int], None],
    stop_requested: Callable[[], bool],
    edit: EditInputs | None = None,
    on_latents: Callable[[Any, int, int], None] | None = None,
    loras: Sequence[tuple[Path, float]] = (),
    hires: HiresRun | None = None,
) -> Rendered:
    """Runs the pipeline on `device`, then puts `home` and the model's scheduler back.

    `on_step` counts asked steps and may raise Cancelled. `stop_requested()` runs hundreds of
    times a step, so it must be a flag read. `on_latents` must not change the latents. `loras`
    (file, weight) run for this image alone; the encoders see the prompt without its tags.
    `hires` adds the upscale and the second pass; the steps count both passes'."""
    import torch

    def check() -> None:
        if stop_requested():
            raise Cancelled()

    marks: dict[str, float] = {}
    step_seconds: list[float] = []
    total = steps_running(parameters)
    # The pass running: the steps done before it, and its own (a hires fix has two passes).
    span = [0, total if hires is None else parameters.steps]

    def step_end(pipe_: Any, index: int, _timestep: Any, tensors: dict) -> dict:
        now = time.monotonic()
        calls = getattr(pipe_, "num_timesteps", None) or span[1]
        done = span[0] + asked_steps_done(index + 1, calls, span[1])
        if done > len(step_seconds):  # the steps this timestep completed share its time
            since = marks.get("step_mark") or marks.get("encoded", now)
            new = done - len(step_seconds)
            step_seconds.extend([(now - since) / new] * new)
            marks["step_mark"] = now
        marks["steps_done"] = now
        on_step(done, total)
        if on_latents is not None:
            on_latents(tensors.get("latents"), done, total)
        return tensors

    runs, inputs, mask = pipe, {}, None
    if edit is not None:
        runs = edit_pipeline(pipe, inpaint=edit.mask is not None)
        inputs = {"image": edit.image, "strength": edit.strength}
        if edit.mask is not None:
            mask = blurred_mask(edit.mask, edit.mask_blur)
            inputs["mask_image"] = mask
    size = {"width": parameters.width, "height": parameters.height}
    if edit is not None and edit.mask is None:
        size = {}  # img2img works at its image's size and takes none
    if edit is not None and edit.cutout is not None and mask is not None:  # "only masked"
        inputs = {**inputs, "image": edit.cutout.cut(edit.image),
                  "mask_image": edit.cutout.cut(mask)}  # fmt: skip
        width, height = edit.cutout.region.size
        size = {"width": width, "height": height}

    def unet_called(*_: Any) -> None:
        marks.setdefault("encoded", time.monotonic())

    hook = pipe.unet.register_forward_pre_hook(unet_called)
    try:
        if device != home:
            pipe.to(device)
        with (
            loras_applied.applied(pipe, loras),  # first: the hooks below sit on its layers
            torch.inference_mode(),
            scheduler_applied(runs, scheduler),
            prompt_cache.used(pipe, runs),
            stop_points(pipe).watching(check),  # the hooks sit on the shared modules
        ):
            started = time.monotonic()
            # A CPU generator gives the same image for a seed on every device.
            generator = torch.Generator("cpu").manual_seed(parameters.seed)
            image = runs(
                prompt=without_tags(parameters.prompt),
                negative_prompt=parameters.negative_prompt,
                num_inference_steps=parameters.steps,
                guidance_scale=parameters.guidance,
                **size,
                **inputs,
                **(hires.first_pass_output if hires is not None else {}),
                generator=generator,
                callback_on_step_end=step_end,
            ).images[0]
            if hires is not None:
                span[:] = [parameters.steps, total - parameters.steps]
                image = hires.finish(
                    pipe, image, parameters=parameters, scheduler=scheduler,
                    generator=generator, check=check, step_end=step_end,
                )  # fmt: skip
            finished = time.monotonic()
            if edit is not None and mask is not None:
                if edit.cutout is not None:
                    image = edit.cutout.put_back(image, edit.image)
                image = pasted_back(image, edit.image, mask)
    finally:
        hook.remove()
        if device != home:
            pipe.to(home)
    encoded = marks.get("encoded", started)
    steps_done = marks.get("steps_done", encoded)
    return Rendered(
        step_seconds=tuple(step_seconds),
        image=image,
        stages={
            "encode_seconds": encoded - started,
            "denoise_seconds": steps_done - encoded,
            "decode_seconds": finished - steps_done,
        },
    )
