"""POST /upscale's body: a form (the image a file part) or the same fields as a JSON object (the
image base64), read through the same schema as /generate's."""

from typing import Annotated, ClassVar

from django.http import HttpRequest, HttpResponse
from ninja import Schema
from pydantic import ConfigDict, Field

from core.errors import FieldError
from imagegen import selectors
from imagegen.api import generate_body
from imagegen.api.bounds import AtMost
from imagegen.api.schemas import Integer, Number, Optional
from imagegen.backend import current_backend
from imagegen.generation.images import ImageRecord
from imagegen.generation.job_board import JobView

IMAGE_PART = {"image": "the image to upscale: PNG, JPEG or WebP (or send `image_id`)"}
NOT_A_FIELD = "is not a field of /upscale"
IMAGE_ID = r"^\d{8}T\d{12}Z-[0-9a-f]{6}$"  # imagegen.generation.images's ids


class UpscaleForm(Schema):
    """The upscale's fields; the image itself is a file part (base64 text in JSON)."""

    model_config = ConfigDict(extra="forbid")
    FIELDS: ClassVar[tuple[str, ...]] = ("image_id", "upscaler", "scale", "width", "height")

    image_id: Annotated[Annotated[str, Field(pattern=IMAGE_ID)] | None, *Optional] = Field(
        default=None, description="a stored image (GET /images) to upscale instead of a file"
    )
    upscaler: Annotated[Annotated[str, Field(max_length=200)] | None, *Optional] = Field(
        default=None,
        description="a name /sdapi/v1/upscalers lists; default: the first UPSCALERS entry, "
        "else Lanczos",
    )
    scale: Annotated[
        Annotated[float, Field(gt=1, allow_inf_nan=False), AtMost("GEN_MAX_SIDE"), Number] | None,
        *Optional,
    ] = Field(
        default=None,
        description="the result's side over the source's, above 1; or a width and/or height",
    )
    width: Annotated[
        Annotated[int, Field(ge=1), AtMost("GEN_MAX_SIDE"), Integer] | None, *Optional
    ] = Field(default=None, description="the result's width, instead of scale")
    height: Annotated[
        Annotated[int, Field(ge=1), AtMost("GEN_MAX_SIDE"), Integer] | None, *Optional
    ] = Field(default=None, description="the result's height, instead of scale")


def check_sent_names(request: HttpRequest) -> None:
    """Refuses a field the form does not have, naming it, as /generate does."""
    fields, parts = generate_body.sent_names(request)
    for name in [*fields, *parts]:
        if name not in (*UpscaleForm.FIELDS, "image"):
            raise FieldError(name, NOT_A_FIELD)


def sent_image(request: HttpRequest) -> bytes | None:
    return generate_body.edit_inputs(request)[0]


def upscale_png(record: ImageRecord, job: JobView) -> HttpResponse:
    """The PNG with what ran in headers, as /generate answers its PNG."""
    png = HttpResponse(
        selectors.image_png(current_backend(), image_id=record.id).read_bytes(),
        content_type="image/png",
    )
    upscale = record.parameters.upscale
    assert upscale is not None, "an upscale's record"
    png["X-Upscaler"] = upscale.upscaler
    png["X-Scale"] = f"{upscale.scale:g}"
    png["X-Size"] = f"{record.parameters.width}x{record.parameters.height}"
    png["X-Device"] = record.device
    png["X-Upscale-Seconds"] = f"{record.timings['upscale_seconds']:.3f}"
    png["X-Image-Id"] = record.id
    png["X-Job-Id"] = job.id
    return png
