"""What a generation asks for, in any protocol: the request every surface builds, the edit
it may carry, the edit part of the record, and every default an edit takes.

Why a module of its own: each protocol translates its body into these types and nothing
more, so a default or a bound written here holds for all of them. Step, guidance and
scheduler defaults follow the model (imagegen.generation.presets) and are applied with the
caps at submission (imagegen.generation.parameters.with_defaults); an edit's do not, and are
applied here, once (edit_settings).

The request carries only the inputs' sha256 (the files sit in the image store, on the share
in distributed mode), so a job's request stays small wherever it is queued: a 16 MB body
never goes through Redis.
"""

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from core.errors import FieldError
from imagegen.generation import framing
from imagegen.generation.framing import JUST_RESIZE, Region
from imagegen.generation.hires import Hires
from imagegen.generation.presets import Adjustment
from imagegen.generation.schedulers import SCHEDULERS
from imagegen.generation.stored_ids import SHA256
from imagegen.generation.upscale_request import UpscaleRequest

SEED_MAX = 2**32 - 1
STRENGTH_DEFAULT = 0.75
MASK_BLUR_DEFAULT = 4  # A1111's
MASK_BLUR_MAX = 64  # A1111's slider's end
ONLY_MASKED_PADDING_DEFAULT = 32  # A1111's slider's default (its API's is 0)
ONLY_MASKED_PADDING_MAX = 256  # A1111's slider's end

# The refusals' words, the same whatever was sent (clients and the schema fuzzer match them).
EDIT_ONLY = "applies to an edit only: send an `image` file part"
MASK_NEEDS_IMAGE = "needs an `image` file part to mask"
MASK_ONLY = "applies to an inpainting only: send a `mask` file part"
ONLY_MASKED_ONLY = "applies with only_masked=true only"


class EditRequest(BaseModel):
    """What an edit adds to a generation request: its inputs by sha256 (in the image
    store), the strength and the mask's blur."""

    model_config = ConfigDict(frozen=True)

    # Checked where read back from a store (a worker's job): a digest names a file.
    source: str = Field(pattern=SHA256.pattern, description="sha256 of the input image as sent")
    mask: str | None = Field(
        default=None, pattern=SHA256.pattern, description="sha256 of the mask as sent"
    )
    strength: float = STRENGTH_DEFAULT
    mask_blur: int = MASK_BLUR_DEFAULT
    resize_mode: int = Field(default=JUST_RESIZE, description="A1111's, as it runs: 0, 1 or 2")
    only_masked: Region | None = Field(default=None, description="null: the whole picture")


class LoraUse(BaseModel):
    """A LoRA a prompt's `<lora:name:weight>` tag runs, as checked against the offered ones."""

    model_config = ConfigDict(frozen=True)

    name: str
    weight: float
    path: str = Field(description="its file, relative to MODEL_DIR")
    hash: str = Field(default="", description="its file's sha256, the first 12 characters")
    preset: str | None = Field(
        default=None, description="the few-step recipe it is (imagegen.generation.presets)"
    )

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler):
        data = handler(self)
        if isinstance(data, dict) and self.preset is None:
            data.pop("preset", None)
        return data


class GenerationRequest(BaseModel):
    """What a client asked for, in any protocol; a job reports it as it will run: defaults
    filled in and caps applied (steps, guidance, scheduler, seed; `adjusted` says what was
    changed from what the client sent), so a job shows its seed from the start."""

    model_config = ConfigDict(frozen=True)

    prompt: str
    negative_prompt: str | None = None
    steps: int | None = None
    guidance: float | None = None
    scheduler: str | None = Field(default=None, description="null: the model's own scheduler")
    size: tuple[int, int] | None = Field(default=None, description="null: the model's native size")
    seed: int | None = None
    force_cpu: bool = False
    edit: EditRequest | None = Field(
        default=None, description="null: text-to-image; else the image (and mask) it starts from"
    )

    partial_images: int = Field(
        default=0, description="an OpenAI stream's partial images: previews made at their steps"
    )
    model: str | None = Field(
        default=None,
        description="the offered model (MODELS) that runs it, by repo id; absent: MODEL_ID",
    )
    loras: tuple[LoraUse, ...] = Field(
        default=(),
        description="the LoRAs the prompt's <lora:name:weight> tags (and the native `lora` and "
        "`loras` fields) run, one entry per LoRA; absent: none",
    )
    quality: str | None = Field(
        default=None, description="OpenAI's quality recipe (low, medium, high); absent: none"
    )
    preset: str | None = Field(
        default=None,
        description="the preset whose defaults and caps ran: the model's, or a prompt's "
        "few-step LoRA's; absent: none",
    )
    upscale: UpscaleRequest | None = Field(
        default=None, description="an upscale (POST /upscale); its prompt fields stay empty"
    )
    hires: Hires | None = Field(
        default=None,
        description="a text-to-image's hires fix (`size` its first pass); absent: none",
    )

    # Text-to-image answers, records and PNGs carry no `edit` key at all, and no
    # `partial_images` unless a stream asked for some.
    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler):
        # No return annotation: pydantic then documents the model's own fields.
        data = without_absent_fields(
            self, handler,
            ("partial_images", "model", "loras", "upscale", "hires", "quality", "preset"),
        )  # fmt: skip
        return data

    adjusted: list[Adjustment] = Field(
        default_factory=list,
        description="values changed from what the client sent (a cap, a scheduler the model "
        "cannot use), each with the value asked",
    )

    def answered(self) -> "GenerationRequest":
        """The request as clients read it: its scheduler, and a scheduler's `adjusted` values,
        by A1111's names ("Euler a", not the table's `euler_a`), as records name them."""
        adjusted = [
            change.model_copy(
                update={"asked": _a1111(change.asked), "applied": _a1111(change.applied)}
            )
            if change.field == "scheduler"
            else change
            for change in self.adjusted
        ]
        scheduler = None if self.scheduler is None else _a1111(self.scheduler)
        return self.model_copy(update={"scheduler": scheduler, "adjusted": adjusted})


def _a1111(value: Any) -> Any:
    """A1111's name for a name of the table; anything else as it is."""
    return SCHEDULERS[value].a1111_name if isinstance(value, str) and value in SCHEDULERS else value


def without_absent_fields(model: Any, handler: Any, optional: tuple[str, ...] = ()) -> Any:
    """A request's or record's fields, without `edit` when it is None (a text-to-image
    answer, record and PNG have no `edit` key) and without each `optional` field that is None
    or empty: an answer names only what its request used."""
    data = handler(model)
    if isinstance(data, dict):
        for name in ("edit", *optional):
            if not getattr(model, name, None):  # a set edit, a model, is always true
                data.pop(name, None)
    return data


class InputLink(BaseModel):
    model_config = ConfigDict(frozen=True)

    sha256: str
    url: str


class InpaintModel(BaseModel):
    """The inpainting checkpoint whose UNet ran (INPAINT_MODEL_ID), at its commit."""

    model_config = ConfigDict(frozen=True)

    model_id: str
    revision: str


class EditParameters(BaseModel):
    """What the record says of an edit: its inputs (a link to each) and what ran."""

    model_config = ConfigDict(frozen=True)

    source: InputLink
    mask: InputLink | None
    strength: float
    mask_blur: int
    steps_run: int = Field(description="denoising steps that ran: max(1, int(steps x strength))")
    resize_mode: int = JUST_RESIZE
    only_masked: Region | None = None
    # Absent (not null) when the base model's UNet ran, so such a record has no such key.
    inpaint_model: InpaintModel | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="the inpainting checkpoint whose UNet ran (INPAINT_MODEL_ID); absent: "
        "the base model's",
    )


@dataclass(frozen=True)
class EditSettings:
    """An edit's settings with every default filled in and every bound checked."""

    strength: float
    mask_blur: int
    resize_mode: int
    only_masked_padding: int | None  # None: the whole picture is worked


def edit_settings(
    *,
    strength: float | None = None,
    mask_blur: int | None = None,
    resize_mode: int | None = None,
    only_masked: bool = False,
    only_masked_padding: int | None = None,
) -> EditSettings:
    """The one place an edit's defaults are applied: a value not sent (None) takes its
    default, and a value sent out of bounds is a FieldError naming it. `resize_mode` runs as
    framing.resize_mode says. `only_masked_padding` counts only with `only_masked`."""
    strength = STRENGTH_DEFAULT if strength is None else strength
    if not 0 < strength <= 1:
        raise FieldError("strength", f"must be greater than 0 and at most 1, got {strength:g}")
    mask_blur = MASK_BLUR_DEFAULT if mask_blur is None else mask_blur
    if not 0 <= mask_blur <= MASK_BLUR_MAX:
        raise FieldError(
            "mask_blur", f"must be between 0 and {MASK_BLUR_MAX} pixels, got {mask_blur}"
        )
    padding = None
    if only_masked:
        padding = (
            ONLY_MASKED_PADDING_DEFAULT if only_masked_padding is None else only_masked_padding
        )
        if not 0 <= padding <= ONLY_MASKED_PADDING_MAX:
            raise FieldError(
                "only_masked_padding",
                f"must be between 0 and {ONLY_MASKED_PADDING_MAX} pixels, got {padding}",
            )
    return EditSettings(
        strength=strength,
        mask_blur=mask_blur,
        resize_mode=framing.resize_mode(JUST_RESIZE if resize_mode is None else resize_mode),
        only_masked_padding=padding,
    )
