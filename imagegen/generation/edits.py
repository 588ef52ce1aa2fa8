"""An edit: a generation that starts from an image (img2img), and with a mask repaints only
the marked area (inpainting).

Why a module of its own: the rules every surface shares live here once, from the checks on
an uploaded file to what the record says ran. The request carries only the inputs' sha256
(the files themselves sit in the image store, imagegen.generation.images, on the share in
distributed mode), so a job's request stays small wherever it is queued: a 16 MB body never
goes through Redis.

The rules:
- strength s (0 < s <= 1) noises the image to that fraction of the schedule; of `steps`,
  max(1, int(steps x s)) denoising steps run (diffusers' and A1111's rule, at least one).
- the working size is the one sent, else the input's with each side rounded down to a
  multiple of 8 and kept within GEN_MIN_SIDE..GEN_MAX_SIDE; the image (and the mask) are
  brought to it by A1111's resize_mode when it differs (imagegen.generation.framing).
- "only masked": the marked area's box, padded, is cut out, worked at a size of its own and
  pasted back (imagegen.generation.framing.only_masked_region).
- the mask: white repaints, black keeps, grey blends; its edge is blurred by `mask_blur`
  pixels, and pixels farther than twice that from a marked pixel are the input's, exactly
  (imagegen.generation.masks).
"""

import hashlib
import io
import threading
from dataclasses import dataclass
from typing import Any

from PIL import Image
from pydantic import BaseModel, ConfigDict, Field

from core.errors import FieldError, ServiceError
from imagegen.generation.framing import (
    JUST_RESIZE,
    ONLY_MASKED_PADDING_MAX,
    Cutout,
    Region,
    resized,
)
from imagegen.generation.stored_ids import SHA256

STRENGTH_DEFAULT = 0.75
MASK_BLUR_DEFAULT = 4  # A1111's
MASK_BLUR_MAX = 64  # A1111's slider's end
# The most pixels an input may declare, checked from its header before any pixel is
# decoded (a decompression bomb is refused, not decoded): 4 x GEN_MAX_SIDE squared.
INPUT_PIXELS_FACTOR = 4
# The refusals' words, the same whatever was sent (clients and the schema fuzzer match them).
NOT_AN_IMAGE = "must be a PNG, JPEG or WebP image, whole: this is none of them, or is truncated"
EDIT_ONLY = "applies to an edit only: send an `image` file part"
MASK_NEEDS_IMAGE = "needs an `image` file part to mask"
MARKS_NOTHING = (
    "marks nothing to repaint (no pixel but black; in OpenAI's mask, no pixel at all "
    "transparent): the answer would be the image as sent. Send no mask for img2img of the "
    "whole picture"
)
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
    # Absent (not null) when the base model's UNet ran: records as before the checkpoint.
    inpaint_model: InpaintModel | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="the inpainting checkpoint whose UNet ran (INPAINT_MODEL_ID); absent: "
        "the base model's",
    )


def without_absent_edit(model: Any, handler: Any) -> Any:
    """A request's or record's fields, without `edit` when it is None: a text-to-image
    answer, record and PNG stay byte for byte what they were before edits existed."""
    data = handler(model)
    if isinstance(data, dict) and getattr(model, "edit", None) is None:
        data.pop("edit", None)
    return data


def input_url(sha256: str) -> str:
    return f"/images/inputs/{sha256}"


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


def input_digests(edit: EditRequest | EditParameters | None) -> set[str]:
    """The sha256 of an edit's inputs (a request's EditRequest or a record's
    EditParameters); none for text-to-image."""
    if edit is None:
        return set()
    if isinstance(edit, EditRequest):
        return {edit.source} | ({edit.mask} if edit.mask else set())
    return {edit.source.sha256} | ({edit.mask.sha256} if edit.mask else set())


def steps_run(steps: int, strength: float) -> int:
    """The denoising steps an edit of `steps` at `strength` runs."""
    return max(1, int(steps * strength))


def pipeline_strength(steps: int, strength: float) -> float:
    """The strength to hand diffusers so that it runs exactly steps_run(steps, strength):
    diffusers runs int(steps x s), which is 0 for a small s (it then refuses), and a
    float's rounding may make int(steps x run/steps) one less than run. Half a step more
    rounds down to `run` itself; full strength stays 1.0 (diffusers starts from pure noise
    only then)."""
    run = steps_run(steps, strength)
    return 1.0 if run >= steps else (run + 0.5) / steps


def working_size(size: tuple[int, int], *, low: int, high: int) -> tuple[int, int]:
    """The input's size as the model takes it: each side rounded down to a multiple of 8,
    then within `low`..`high`."""
    width, height = (min(high, max(low, side - side % 8)) for side in size)
    return width, height


def check_strength(value: float) -> float:
    if not 0 < value <= 1:
        raise FieldError("strength", f"must be greater than 0 and at most 1, got {value:g}")
    return value


def check_mask_blur(value: int) -> int:
    if not 0 <= value <= MASK_BLUR_MAX:
        raise FieldError("mask_blur", f"must be between 0 and {MASK_BLUR_MAX} pixels, got {value}")
    return value


def check_only_masked_padding(value: int) -> int:
    if not 0 <= value <= ONLY_MASKED_PADDING_MAX:
        raise FieldError(
            "only_masked_padding",
            f"must be between 0 and {ONLY_MASKED_PADDING_MAX} pixels, got {value}",
        )
    return value


# The formats an uploaded image may be in: what clients send, and no more of Pillow's
# decoders (each one more is more code that reads what anyone sends).
IMAGE_FORMATS = ("PNG", "JPEG", "WEBP")
# Images decoded at once in this process: each may be 4 x GEN_MAX_SIDE squared pixels (64 MB
# and more at 2048) and seconds of CPU, so a burst of uploads waits its turn here rather than
# taking the memory and the interpreter together; one that waits DECODE_WAIT is refused.
DECODES_AT_ONCE = 2
DECODE_WAIT = 10.0
_decodes = threading.BoundedSemaphore(DECODES_AT_ONCE)


class DecodesBusy(ServiceError):
    status = 503
    message = "Too many uploaded images are being read at once; try again shortly"
    retry_after = 5


def read_image(data: bytes, *, field: str, max_pixels: int) -> Image.Image:
    """The uploaded file `data` decoded, or a FieldError naming `field`: not a PNG, JPEG or
    WebP image, a size past `max_pixels` (read from the header, before any pixel is
    decoded), a truncated or otherwise undecodable file. An animated image gives its first
    frame. At most DECODES_AT_ONCE decode at once (DecodesBusy past DECODE_WAIT)."""
    if not _decodes.acquire(timeout=DECODE_WAIT):
        raise DecodesBusy()
    try:
        return _decoded(data, field=field, max_pixels=max_pixels)
    finally:
        _decodes.release()


def _decoded(data: bytes, *, field: str, max_pixels: int) -> Image.Image:
    bound = f"past the bound of {max_pixels} pixels (4 x GEN_MAX_SIDE squared)"
    try:
        image = Image.open(io.BytesIO(data), formats=IMAGE_FORMATS)
        width, height = image.size
        if width * height > max_pixels:
            raise FieldError(field, f"declares {width}x{height} pixels, {bound}")
        image.load()  # every pixel now: a truncated file fails here, not in the job
    except FieldError:
        raise
    except Image.DecompressionBombError:  # Pillow's own bound, far above ours by default
        raise FieldError(field, f"declares more pixels than Pillow decodes, {bound}") from None
    except Exception:  # a malformed file raises anything from a decoder
        raise FieldError(field, NOT_AN_IMAGE) from None
    return image


@dataclass(frozen=True)
class CheckedInputs:
    """An edit's uploaded files, read and checked, not yet stored."""

    image: bytes
    mask: bytes | None
    size: tuple[int, int]


def check_inputs(image: bytes, mask: bytes | None, *, max_pixels: int) -> CheckedInputs:
    """Both files read before either is stored, so a refused request writes nothing."""
    source = read_image(image, field="image", max_pixels=max_pixels)
    if mask is not None:
        marked = read_image(mask, field="mask", max_pixels=max_pixels)
        if marked.size != source.size:
            raise FieldError(
                "mask",
                f"must be the image's size, {source.width}x{source.height}; got "
                f"{marked.width}x{marked.height}",
            )
        if marked.convert("L").getextrema()[1] == 0:
            raise FieldError("mask", MARKS_NOTHING)
    return CheckedInputs(image=image, mask=mask, size=source.size)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class EditInputs:
    """An edit's inputs as the pipeline takes them: at the working size, RGB, and the mask
    as one channel (None: img2img)."""

    image: Any  # a PIL image
    mask: Any | None
    strength: float  # what diffusers is handed (pipeline_strength)
    mask_blur: int
    cutout: Cutout | None = None  # "only masked": the part of the picture worked


def prepared_inputs(
    image: bytes, mask: bytes | None, *, size: tuple[int, int], steps: int, edit: EditRequest
) -> EditInputs:
    """The stored files decoded and brought to the working `size` by the edit's resize
    mode. Alpha, palette, CMYK and 16-bit inputs become 8-bit RGB."""
    source = resized(_first_frame(image).convert("RGB"), size, edit.resize_mode)
    marked = None if mask is None else picture_mask(mask, size=size, resize_mode=edit.resize_mode)
    cutout = None if edit.only_masked is None else Cutout(edit.only_masked)
    return EditInputs(
        image=source, mask=marked, strength=pipeline_strength(steps, edit.strength),
        mask_blur=edit.mask_blur, cutout=cutout,
    )  # fmt: skip


def picture_mask(mask: bytes, *, size: tuple[int, int], resize_mode: int) -> Image.Image:
    """The stored mask as one channel at the picture's `size`, framed as its image is."""
    return resized(_first_frame(mask).convert("L"), size, resize_mode)


def _first_frame(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.seek(0)
    image.load()
    return image
