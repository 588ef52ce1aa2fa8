"""An edit's uploads: checked before anything is stored, decoded where the job runs.

Anyone can upload, so one reader bounds what a file may cost, in the same words everywhere."""

import io
import threading
from dataclasses import dataclass
from typing import Any

from PIL import Image

from core.errors import FieldError, ServiceError
from imagegen.generation.framing import Cutout, resized
from imagegen.generation.parameters import steps_run
from imagegen.generation.requests import EditParameters, EditRequest

# The most pixels an input may declare (4 x GEN_MAX_SIDE squared). Checked from the header, so a
# decompression bomb is refused, not decoded.
INPUT_PIXELS_FACTOR = 4
# The refusals' words, the same whatever was sent: clients and the fuzzer match them.
NOT_AN_IMAGE = "must be a PNG, JPEG or WebP image, whole: this is none of them, or is truncated"
MARKS_NOTHING = (
    "marks nothing to repaint (no pixel but black; in OpenAI's mask, no pixel at all "
    "transparent): the answer would be the image as sent. Send no mask for img2img of the "
    "whole picture"
)

# What clients send, and no other Pillow decoder: each one more reads what anyone sends.
IMAGE_FORMATS = ("PNG", "JPEG", "WEBP")
# Decodes at once in this process. Each may take 64 MB and seconds of CPU, so a burst waits here
# instead. One that waits DECODE_WAIT is refused.
DECODES_AT_ONCE = 2
DECODE_WAIT = 10.0
_decodes = threading.BoundedSemaphore(DECODES_AT_ONCE)


class DecodesBusy(ServiceError):
    status = 503
    message = "Too many uploaded images are being read at once; try again shortly"
    retry_after = 5


def read_image(data: bytes, *, field: str, max_pixels: int) -> Image.Image:
    """The decoded upload, or a FieldError naming `field`.

    Refused: not PNG, JPEG or WebP; over `max_pixels` by its header; undecodable. An animation
    gives its first frame. Past DECODE_WAIT for a decode slot, DecodesBusy."""
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
    """An edit's uploads, checked, not yet stored."""

    image: bytes
    mask: bytes | None
    size: tuple[int, int]


def check_inputs(image: bytes, mask: bytes | None, *, max_pixels: int) -> CheckedInputs:
    """Both files are read before either is stored, so a refused request writes nothing."""
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
    """None for text-to-image."""
    if edit is None:
        return set()
    if isinstance(edit, EditRequest):
        return {edit.source} | ({edit.mask} if edit.mask else set())
    return {edit.source.sha256} | ({edit.mask.sha256} if edit.mask else set())


def pipeline_strength(steps: int, strength: float) -> float:
    """The strength that makes diffusers run exactly steps_run(steps, strength).

    diffusers runs int(steps x s); half a step more survives float rounding. Full strength stays
    1.0, the only one that starts from pure noise."""
    run = steps_run(steps, strength)
    return 1.0 if run >= steps else (run + 0.5) / steps


@dataclass(frozen=True)
class EditInputs:
    """RGB at the working size; the mask as one channel (None: img2img)."""

    image: Any  # a PIL image
    mask: Any | None
    strength: float  # what diffusers is handed (pipeline_strength)
    mask_blur: int
    cutout: Cutout | None = None  # "only masked": the part of the picture worked


def prepared_inputs(
    image: bytes, mask: bytes | None, *, size: tuple[int, int], steps: int, edit: EditRequest
) -> EditInputs:
    """Decoded at `size` by the resize mode; every input becomes 8-bit RGB."""
    source = resized(_first_frame(image).convert("RGB"), size, edit.resize_mode)
    marked = None if mask is None else picture_mask(mask, size=size, resize_mode=edit.resize_mode)
    cutout = None if edit.only_masked is None else Cutout(edit.only_masked)
    return EditInputs(
        image=source, mask=marked, strength=pipeline_strength(steps, edit.strength),
        mask_blur=edit.mask_blur, cutout=cutout,
    )  # fmt: skip


def picture_mask(mask: bytes, *, size: tuple[int, int], resize_mode: int) -> Image.Image:
    """The mask at the picture's `size`, framed as its image is."""
    return resized(_first_frame(mask).convert("L"), size, resize_mode)


def _first_frame(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.seek(0)
    image.load()
    return image
