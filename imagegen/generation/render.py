"""One image generation: the pipeline run for parameters already resolved
(imagegen.generation.parameters), with a step-end callback that reports progress, and stop
points inside the model's blocks (imagegen.generation.stop_points) that end it within a
block when it is cancelled (imagegen.generation.execution runs these).

Progress counts the steps the client asked for, whatever the scheduler makes of them: PNDM
runs 21 model calls for 20 steps (its warm-up), Heun two per step, and a client that asked for
20 reads "of 20" (asked_steps_done).

The run is timed by stage (text encoders, denoising steps, decode) from two hooks that cost
nothing per step: a forward pre-hook on the UNet marks the end of the prompt encoding (its
first call), the step-end callback marks the end of the last step.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from imagegen.generation.edit_inputs import EditInputs
from imagegen.generation.images import GenerationParameters
from imagegen.generation.masks import blurred_mask, pasted_back
from imagegen.generation.parameters import steps_running
from imagegen.generation.schedulers import scheduler_applied
from imagegen.generation.stop_points import stop_points
from imagegen.model.edit_pipelines import edit_pipeline


class Cancelled(Exception):
    """Raised from the step-end callback, or from a stop point within a step or the decode,
    to stop a generation."""


@dataclass(frozen=True)
class Rendered:
    image: Any  # a PIL image
    stages: dict[str, float]  # encode_seconds, denoise_seconds, decode_seconds
    # Each step asked for, from the UNet's first call (or the step before) to its end: what
    # imagegen_step_seconds observes. A scheduler that makes more timesteps than steps (PNDM's
    # 21 for 20) has some step cover two; one that makes fewer shares a timestep's time out.
    step_seconds: tuple[float, ...] = ()


def asked_steps_done(calls_done: int, calls: int, asked: int) -> int:
    """How many of the `asked` steps `calls_done` of the scheduler's `calls` timesteps make:
    in proportion, rounded down, so the count never goes back and reaches `asked` at the last
    call and not before, whether the scheduler makes more timesteps than asked (PNDM's 21 for
    20) or fewer."""
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
) -> Rendered:
    """Runs the pipeline on `device` (force_cpu on an accelerator host: the CPU, and back to
    `home` afterwards) with `scheduler` from the table (None: the model's own; either way the
    model's own one is in place after). `on_step(done, total)` runs after each of the
    scheduler's timesteps and may raise Cancelled; both count the parameters' steps, the
    steps asked for (an edit's: those it runs, steps_running), however many timesteps the
    scheduler makes of them. `stop_requested()` is asked before every stoppable part of the
    UNet and the decoder, hundreds of times a step, so it must be a flag read; True raises
    Cancelled there. With `edit`, the img2img or inpainting pipeline built from `pipe`'s
    components runs (imagegen.model.edit_pipelines), and an inpainting's answer is the input
    outside its mask's blurred edge (imagegen.generation.masks). `on_latents(latents, done,
    total)` runs after `on_step` with the step's latents, which it must not change (the
    live previews, imagegen.generation.previews)."""
    import torch

    def check() -> None:
        if stop_requested():
            raise Cancelled()

    marks: dict[str, float] = {}
    step_seconds: list[float] = []
    total = steps_running(parameters)

    def step_end(pipe_: Any, index: int, _timestep: Any, tensors: dict) -> dict:
        now = time.monotonic()
        calls = getattr(pipe_, "num_timesteps", None) or total
        done = asked_steps_done(index + 1, calls, total)
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
            torch.inference_mode(),
            scheduler_applied(runs, scheduler),
            stop_points(pipe).watching(check),  # the hooks sit on the shared modules
        ):
            started = time.monotonic()
            image = runs(
                prompt=parameters.prompt,
                negative_prompt=parameters.negative_prompt,
                num_inference_steps=parameters.steps,
                guidance_scale=parameters.guidance,
                **size,
                **inputs,
                # A CPU generator gives the same image for a seed on every device.
                generator=torch.Generator("cpu").manual_seed(parameters.seed),
                callback_on_step_end=step_end,
            ).images[0]
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
