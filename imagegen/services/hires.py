"""A text-to-image's hires fix checked and resolved before anything is queued: its target size
(from the first pass's, the model's native one when none is sent), its upscaler found among the
latent modes and the offered upscalers, its strength; a refusal names the protocol's field."""

import json
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from core.errors import FieldError
from imagegen.backend import Backend
from imagegen.generation.hires import (
    LATENT_MODES,
    UPSCALER_DEFAULT,
    Hires,
    HiresUpscalerNotPulled,
    checked_strength,
    latent_mode,
    target_size,
)
from imagegen.generation.job_board import check_loadable
from imagegen.generation.requests import GenerationRequest

# Each setting's name in each protocol, for the refusals.
A1111_FIELDS = {
    "scale": "hr_scale", "resize_x": "hr_resize_x", "resize_y": "hr_resize_y",
    "upscaler": "hr_upscaler", "steps": "hr_second_pass_steps",
    "denoising_strength": "denoising_strength",
}  # fmt: skip
NATIVE_FIELDS = {
    "scale": "hires_scale", "resize_x": "hires_width", "resize_y": "hires_height",
    "upscaler": "hires_upscaler", "steps": "hires_steps",
    "denoising_strength": "hires_strength",
}  # fmt: skip


@dataclass(frozen=True)
class HiresAsked:
    """A hires fix as a client sent it; None: not sent (the default applies)."""

    scale: float | None = None
    resize: tuple[int, int] | None = None
    upscaler: str | None = None
    steps: int | None = None
    denoising_strength: float | None = None
    prompt: str | None = None
    negative_prompt: str | None = None


def with_hires(
    backend: Backend, request: GenerationRequest, *, asked: HiresAsked, fields: dict[str, str]
) -> GenerationRequest:
    """`request` (its model already resolved) with its hires fix, or a FieldError naming the
    field by `fields`; an upscaler offered but not on the share is a 409."""
    strength = checked_strength(asked.denoising_strength, field=fields["denoising_strength"])
    if asked.steps is not None and asked.steps < 0:
        raise FieldError(fields["steps"], "must be 0 (the first pass's) or more")
    upscaler, path = _upscaler(backend, asked.upscaler or UPSCALER_DEFAULT, fields["upscaler"])
    first = request.size or _native_size(backend, request)
    size = target_size(
        first, scale=asked.scale, resize=asked.resize, fields=fields,
        max_side=settings.GEN_MAX_SIDE,
    )  # fmt: skip
    resized = asked.resize is not None and any(asked.resize)
    hires = Hires(
        upscaler=upscaler, path=path, scale=None if resized else asked.scale or None,
        resize=asked.resize if resized else None, size=size, steps=asked.steps or 0,
        denoising_strength=strength, prompt=asked.prompt or None,
        negative_prompt=asked.negative_prompt or None,
    )  # fmt: skip
    return request.model_copy(update={"size": first, "hires": hires})


def _upscaler(backend: Backend, name: str, field: str) -> tuple[str, str | None]:
    """The upscaler's name as offered, and its file relative to MODEL_DIR (None: none)."""
    if (mode := latent_mode(name)) is not None:
        return mode, None
    offered = backend.upscalers
    wanted = name.strip().lower()
    for entry in offered.entries:
        if entry.name.lower() == wanted:
            if not offered.on_share(entry):
                raise HiresUpscalerNotPulled(field, entry.name)
            return entry.name, entry.share_path
    for filter_name in offered.names[: len(offered.names) - len(offered.entries)]:
        if filter_name.lower() == wanted:
            return filter_name, None
    names = [*LATENT_MODES, *offered.names]
    raise FieldError(field, f"{name!r} is neither a latent mode nor an offered upscaler; "
                     f"offered: {', '.join(names)}")  # fmt: skip


def _native_size(backend: Backend, request: GenerationRequest) -> tuple[int, int]:
    """The model's own size, from its configs on the share (the request's model must be there:
    a 409 otherwise, as its submit would answer)."""
    offered = backend.offered()
    model = offered.default if request.model is None else offered.find(request.model)
    check_loadable(backend.handle_of(model), request.model)
    folder = model.source.path
    unet = _config(folder / "unet")
    vae = _config(folder / "vae")
    side = int(unet["sample_size"]) * 2 ** (len(vae["block_out_channels"]) - 1)
    return side, side


def _config(folder: Path) -> dict:
    return dict(json.loads((folder / "config.json").read_text()))
