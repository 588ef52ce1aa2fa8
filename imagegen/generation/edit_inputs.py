"""An edit's uploaded files: read and checked before anything is stored, named by their
sha256, and decoded again, at the working size, where the job runs.

Why a module of its own: an upload is what anyone sends, so the one reader of it bounds
what a file may cost (its pixels, read from the header before any is decoded, and the
decodes at once), and every surface refuses a bad file in the same words.

The mask: white repaints, black keeps, grey blends; the image (and the mask) are brought to
the working size by A1111's resize_mode when it differs (imagegen.generation.framing), and
the mask's edge is blurred where the pipeline runs (imagegen.generation.masks).
"""

import io
import threading
from dataclasses import dataclass
from typing import Any

from PIL import Image

from core.errors import FieldError, ServiceError
from imagegen.generation.framing import Cutout, resized
from imagegen.generation.parameters import steps_run
from imagegen.generation.requests import EditParameters, EditRequest

# The most pixels an input may declare, checked from its header before any pixel is
# decoded (a decompression bomb is refused, not decoded): 4 x GEN_MAX_SIDE squared.
INPUT_PIXELS_FACTOR = 4
# The refusals' words, the same whatever was sent (clients and the schema fuzzer match them).
NOT_AN_IMAGE = "must be a PNG, JPEG or WebP image, whole: this is none of them, or is truncated"
MARKS_NOTHING = (
    "marks nothing to repaint (no pixel but black; in OpenAI's mask, no pixel at all "
    "transparent): the answer would be the image as sent. Send no mask for img2img of the "
    "whole picture"
)

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


def input_digests(edit: EditRequest | EditParameters | None) -> set[str]:
    """The sha256 of an edit's inputs (a request's EditRequest or a record's
    EditParameters); none for text-to-image."""
    if edit is None:
        return set()
    if isinstance(edit, EditRequest):
        return {edit.source} | ({edit.mask} if edit.mask else set())
    return {edit.source.sha256} | ({edit.mask.sha256} if edit.mask else set())


def pipeline_strength(steps: int, strength: float) -> float:
    """The strength to hand diffusers so that it runs exactly steps_run(steps, strength):
    diffusers runs int(steps x s), which is 0 for a small s (it then refuses), and a
    float's rounding may make int(steps x run/steps) one less than run. Half a step more
    rounds down to `run` itself; full strength stays 1.0 (diffusers starts from pure noise
    only then)."""
    run = steps_run(steps, strength)
    return 1.0 if run >= steps else (run + 0.5) / steps


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
