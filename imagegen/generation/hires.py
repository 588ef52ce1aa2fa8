"""Hires fix: a text-to-image made at a smaller size, upscaled, then worked again at the target.

A model drifts (two heads, a stretched body) far from the size it was trained at; its first pass
at that size gives the composition and the second pass, an img2img of the upscaled picture, the
detail. The settings are A1111's, checked here once for every protocol: the upscale by a latent
mode (the latents resized, no decode) or by an upscaler's name (decoded, upscaled, encoded). As
in A1111 the second pass runs its steps (`steps`, 0: the first pass's) whatever the denoising
strength: its schedule is stretched so that they are the last ones of it."""

import json

from pydantic import BaseModel, ConfigDict, Field

from core.errors import FieldError, ServiceError
from imagegen.model.upscalers.offered import FILTER_NAMES, parse_upscalers

# A1111's latent upscale modes (its shared.latent_upscale_modes): torch's interpolation and
# antialiasing for each, listed by /sdapi/v1/latent-upscale-modes in this order.
LATENT_MODES: dict[str, tuple[str, bool]] = {
    "Latent": ("bilinear", False),
    "Latent (antialiased)": ("bilinear", True),
    "Latent (bicubic)": ("bicubic", False),
    "Latent (bicubic antialiased)": ("bicubic", True),
    "Latent (nearest)": ("nearest", False),
    "Latent (nearest-exact)": ("nearest-exact", False),
}
UPSCALER_DEFAULT = "Latent"  # webuiapi's, and A1111's when none is named
SCALE_DEFAULT = 2.0  # A1111's page's
STRENGTH_DEFAULT = 0.7  # A1111's page's and webuiapi's
# Timesteps the second pass's stretched schedule may have: SD's training had 1000.
SCHEDULE_MAX = 1000


class Hires(BaseModel):
    """A request's hires fix, its target resolved at submission; the record keeps it with
    `steps` resolved (0 becomes the first pass's)."""

    model_config = ConfigDict(frozen=True)

    upscaler: str = Field(description="a latent mode (/sdapi/v1/latent-upscale-modes) or an "
                          "upscaler's name (/sdapi/v1/upscalers)")  # fmt: skip
    path: str | None = Field(
        default=None, description="the upscaler's file, relative to MODEL_DIR; null: none"
    )
    scale: float | None = Field(default=None, description="asked; null when a size was asked")
    resize: tuple[int, int] | None = Field(
        default=None, description="the width and height asked (0: from the other and the shape)"
    )
    size: tuple[int, int] = Field(description="the result's width and height")
    steps: int = Field(default=0, description="the second pass's; 0: the first pass's")
    denoising_strength: float = STRENGTH_DEFAULT
    prompt: str | None = Field(default=None, description="the second pass's; null: the same")
    negative_prompt: str | None = Field(
        default=None, description="the second pass's; null: the same"
    )

    @property
    def latent(self) -> bool:
        return self.upscaler in LATENT_MODES


class HiresUpscalerNotPulled(ServiceError):
    """An offered upscaler whose file is not on the share yet: 409, nothing queued."""

    status = 409

    def __init__(self, field: str, name: str) -> None:
        super().__init__(
            f"{field}: the upscaler {name} is offered but not on the share yet: POST "
            "/model/pull (or manage.py pull_model) first"
        )


def hires_upscaler_names(upscalers: str) -> list[str]:
    """What a hires fix may name, as the document lists it: the latent modes, then UPSCALERS'
    (`upscalers`, the setting as written) with Pillow's filters first."""
    return [*LATENT_MODES, *FILTER_NAMES, *(e.name for e in parse_upscalers(upscalers))]


def latent_mode(name: str) -> str | None:
    """A latent mode's name as A1111 spells it, for any case; None for another name."""
    return next((mode for mode in LATENT_MODES if mode.lower() == name.strip().lower()), None)


# The refusals' words, the same whatever was sent (clients and the schema fuzzer match them).
SCALE_RULE = "must be greater than 1"
STRENGTH_RULE = "must be greater than 0 and at most 1"
RESIZE_RULE = "must be 0 (none) or more pixels"
TXT2IMG_ONLY = "applies to text-to-image only: send no `image`"


def target_rule(max_side: int) -> str:
    return (
        "the result (the first pass's size times the scale, or the size asked) must be larger "
        f"than the first pass and at most {max_side} pixels a side (GEN_MAX_SIDE)"
    )


def target_size(
    first: tuple[int, int],
    *,
    scale: float | None,
    resize: tuple[int, int] | None,
    fields: dict[str, str],
    max_side: int,
) -> tuple[int, int]:
    """The result's size: `resize` (a side 0 follows the other at the first pass's shape), else
    the first pass's times `scale`; each side rounded down to a multiple of 8, as the latents
    hold it. A FieldError names the field (`fields` maps scale, resize_x and resize_y to the
    protocol's names) when a side passes `max_side` or the result is no larger."""
    width, height = first
    if resize is not None and any(resize):
        wide, high = resize
        for side, key in ((wide, "resize_x"), (high, "resize_y")):
            if side < 0:
                raise FieldError(fields[key], RESIZE_RULE)
        target = (wide or round(high * width / height), high or round(wide * height / width))
        named = fields["resize_x"] if wide else fields["resize_y"]
    else:
        factor = SCALE_DEFAULT if scale is None else scale
        if not factor > 1:
            raise FieldError(fields["scale"], SCALE_RULE)
        target, named = (round(width * factor), round(height * factor)), fields["scale"]
    result = (target[0] - target[0] % 8, target[1] - target[1] % 8)
    if max(result) > max_side or (result[0] <= width and result[1] <= height):
        raise FieldError(named, target_rule(max_side))
    return result


def checked_strength(value: float | None, *, field: str) -> float:
    strength = STRENGTH_DEFAULT if value is None else value
    if not 0 < strength <= 1:
        raise FieldError(field, STRENGTH_RULE)
    return strength


def second_pass_schedule(steps: int, strength: float) -> int:
    """The timesteps to schedule so that an img2img at `strength` runs `steps` of them, as
    diffusers counts them (int(total x strength)); at most SCHEDULE_MAX."""
    total = steps
    while int(total * strength) < steps and total < SCHEDULE_MAX:
        total += 1
    return total


def steps_run(steps: int, strength: float) -> int:
    """What the second pass runs for `steps` asked at `strength` (fewer only past SCHEDULE_MAX)."""
    return max(1, min(steps, int(second_pass_schedule(steps, strength) * strength)))


def infotext(hires: Hires) -> str:
    """The hires part of A1111's infotext, in its words and order."""
    parts = [f"Denoising strength: {hires.denoising_strength:g}"]
    if hires.resize is not None:
        parts.append(f"Hires resize: {hires.resize[0]}x{hires.resize[1]}")
    else:
        parts.append(f"Hires upscale: {hires.scale or SCALE_DEFAULT:g}")
    parts.append(f"Hires steps: {hires.steps}")
    parts.append(f"Hires upscaler: {hires.upscaler}")
    if hires.prompt is not None:
        parts.append(f"Hires prompt: {_quoted(hires.prompt)}")
    if hires.negative_prompt is not None:
        parts.append(f"Hires negative prompt: {_quoted(hires.negative_prompt)}")
    return ", ".join(parts)


def _quoted(text: str) -> str:
    """As A1111 quotes a value holding a comma, colon or quote: JSON."""
    return json.dumps(text) if any(c in text for c in ',:"\n') else text
