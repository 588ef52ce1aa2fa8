"""An upscale's intake: its source, upscaler and size checked, then the source stored, before
any job is queued. Every protocol's upscale comes through here, each with its own field names."""

import math
from dataclasses import dataclass

from django.conf import settings

from core.errors import FieldError, ServiceError
from imagegen import selectors
from imagegen.backend import Backend
from imagegen.generation.edit_inputs import INPUT_PIXELS_FACTOR, read_image
from imagegen.generation.requests import GenerationRequest
from imagegen.generation.upscale_request import UpscaleRequest, network_pixels
from imagegen.model.upscalers.offered import FILTER_NAMES, UnknownUpscaler

# A1111's "None" upscaler resizes with Lanczos (its UpscalerNone returns the image and the
# resize to the size asked is Lanczos); webuiapi sends it by default.
A1111_NONE = "None"
LANCZOS = FILTER_NAMES[0]

# The refusals' words, the same whatever was sent (clients and the schema fuzzer match them).
NO_SOURCE = "send an image to upscale, or a stored image's image_id"
BOTH_SOURCES = "send an image or an image_id, not both"
NO_SCALE = "send a scale, or a width and/or height"
SCALE_AND_SIZE = "send a scale or a width and/or height, not both"
NOT_LARGER = "must make the image larger than the source"


@dataclass(frozen=True)
class UpscaleFields:
    """The names a protocol gives the fields, so a refusal names what the client sent."""

    image: str = "image"
    image_id: str = "image_id"
    upscaler: str = "upscaler"
    scale: str = "scale"
    width: str = "width"
    height: str = "height"
    upscaler_2: str = "upscaler_2"
    upscaler_2_visibility: str = "upscaler_2_visibility"


NATIVE = UpscaleFields()


class UpscalerNotPulled(ServiceError):
    """An offered upscaler whose file is not on the share yet: 409, nothing queued."""

    status = 409

    def __init__(self, name: str) -> None:
        super().__init__(
            f"The upscaler {name} is offered but not on the share yet: POST /model/pull (or "
            "manage.py pull_model) first"
        )


def default_upscaler(backend: Backend) -> str:
    """The first UPSCALERS entry when one is offered (a network is why one is offered), else
    Lanczos."""
    entries = backend.upscalers.entries
    return entries[0].name if entries else LANCZOS


def upscale_request(
    backend: Backend,
    *,
    image: bytes | None,
    image_id: str | None = None,
    seen_by: str | None = None,
    upscaler: str | None = None,
    scale: float | None = None,
    width: int | None = None,
    height: int | None = None,
    crop: bool = True,
    upscaler_2: str | None = None,
    upscaler_2_visibility: float = 0.0,
    fields: UpscaleFields = NATIVE,
) -> GenerationRequest:
    """An upscale job's request, its source stored. Refused with a FieldError naming the field
    (nothing stored): neither or both of an image and an image id, an unknown upscaler, neither
    or both of a scale and a size, a result no larger than the source or past GEN_MAX_SIDE."""
    data, source_image = _source(backend, image, image_id, seen_by, fields)
    high = settings.GEN_MAX_SIDE
    picture = read_image(data, field=fields.image, max_pixels=INPUT_PIXELS_FACTOR * high * high)
    name = _upscaler(backend, upscaler, fields.upscaler)
    second = None
    named_2 = upscaler_2 is not None and upscaler_2.strip().lower() != A1111_NONE.lower()
    if upscaler_2 is not None and named_2 and upscaler_2_visibility > 0:
        second = _upscaler(backend, upscaler_2, fields.upscaler_2)
    if not 0 <= upscaler_2_visibility <= 1:
        raise FieldError(fields.upscaler_2_visibility, "must be between 0 and 1")
    factor, size, field = _size(picture.size, scale, width, height, fields)
    if not crop:  # A1111's upscaling_crop false: the covering size, uncut
        size = _scaled(picture.size, factor)
    upscaled = _scaled(picture.size, factor)
    if max(upscaled) > high:
        raise FieldError(
            field,
            f"makes {upscaled[0]}x{upscaled[1]} of the {picture.width}x{picture.height} source, "
            f"past GEN_MAX_SIDE ({high}) on a side",
        )
    network = name.lower() not in {f.lower() for f in FILTER_NAMES}
    upscale = UpscaleRequest(
        source=backend.images.save_input(data), source_image=source_image, upscaler=name,
        scale=factor, width=size[0], height=size[1], source_width=picture.width,
        source_height=picture.height,
        network_pixels=network_pixels(picture.size, factor) if network else 0,
        upscaler_2=second, upscaler_2_visibility=upscaler_2_visibility if second else 0.0,
    )  # fmt: skip
    return GenerationRequest(prompt="", upscale=upscale)


def _source(
    backend: Backend,
    image: bytes | None,
    image_id: str | None,
    seen_by: str | None,
    fields: UpscaleFields,
) -> tuple[bytes, str | None]:
    """The source's bytes and its stored image's id (None for an upload). Another key's image
    is unknown (404), as GET /images/<id> answers it."""
    if image is not None and image_id is not None:
        raise FieldError(fields.image_id, BOTH_SOURCES)
    if image_id is not None:
        selectors.image_get(backend, image_id=image_id, seen_by=seen_by)
        path = selectors.image_png(backend, image_id=image_id, seen_by=seen_by)
        return path.read_bytes(), image_id
    if image is None:
        raise FieldError(fields.image, NO_SOURCE)
    return image, None


def _upscaler(backend: Backend, asked: str | None, field: str) -> str:
    """The offered upscaler's name as listed; refused when unknown or not pulled yet."""
    if asked is None or not asked.strip():
        asked = default_upscaler(backend)
    if asked.strip().lower() == A1111_NONE.lower():
        asked = LANCZOS
    offered = backend.upscalers
    wanted = asked.strip().lower()
    for name in FILTER_NAMES:
        if name.lower() == wanted:
            return name
    for entry in offered.entries:
        if entry.name.lower() == wanted:
            if not offered.on_share(entry):
                raise UpscalerNotPulled(entry.name)
            return entry.name
    raise UnknownUpscaler(field, asked, offered.names)


def _size(
    source: tuple[int, int],
    scale: float | None,
    width: int | None,
    height: int | None,
    fields: UpscaleFields,
) -> tuple[float, tuple[int, int], str]:
    """The scale the upscaler runs at, the result's size, and the field a refusal names. A
    width and a height both: the scale that covers both, the centre cut to the size (as
    A1111's extras crop)."""
    sized = width is not None or height is not None
    if scale is not None and sized:
        raise FieldError(fields.scale, SCALE_AND_SIZE)
    if scale is None and not sized:
        raise FieldError(fields.scale, NO_SCALE)
    if scale is not None:
        if not math.isfinite(scale) or scale <= 1:
            raise FieldError(fields.scale, f"must be above 1, got {scale:g}")
        return scale, _scaled(source, scale), fields.scale
    for field, value in ((fields.width, width), (fields.height, height)):
        if value is not None and value < 1:
            raise FieldError(field, f"must be at least 1 pixel, got {value}")
    ratios = [v / s for v, s in ((width, source[0]), (height, source[1])) if v is not None]
    factor = max(ratios)
    field = fields.width if width is not None else fields.height
    if factor <= 1:
        raise FieldError(field, NOT_LARGER)
    scaled = _scaled(source, factor)
    return factor, (width or scaled[0], height or scaled[1]), field


def _scaled(source: tuple[int, int], scale: float) -> tuple[int, int]:
    """As the upscaler rounds (imagegen.model.upscalers.upscaler.target_size)."""
    return max(1, round(source[0] * scale)), max(1, round(source[1] * scale))
