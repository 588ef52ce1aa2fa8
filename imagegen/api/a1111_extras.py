"""A1111's extras (`/sdapi/v1/extra-single-image`, `/extra-batch-images`): each image an
upscale job like POST /upscale's (services.upscale_request), run for this client as txt2img's
jobs are, so /progress, /interrupt and the key's limits see them; answered in A1111's shapes.

`upscaling_resize` is the result's scale whatever the network's own (a 4x network asked for 2x
runs at 4x and is resized to 2x, as A1111 does); `resize_mode` 1 asks for
`upscaling_resize_w` x `upscaling_resize_h` instead, cut from the centre unless
`upscaling_crop` is false. Face restoration is not offered: its visibilities are 0 only."""

import html
from typing import Annotated

from django.http import HttpRequest
from ninja import Router, Schema
from pydantic import ConfigDict, Field

from apikeys.auth import seen_by, token_or_basic_required
from core.errors import FieldError
from imagegen import services
from imagegen.api.bounds import AtMost
from imagegen.api.protocol import admit, decode_base64, png_base64, run_for_client
from imagegen.api.schemas import errors
from imagegen.backend import current_backend
from imagegen.generation.images import ImageRecord
from imagegen.generation.requests import GenerationRequest
from imagegen.services.upscale_intake import UpscaleFields

router = Router(tags=["automatic1111"])
auth = token_or_basic_required()

SCALE_BY, SCALE_TO = 0, 1  # A1111's resize_mode
NO_FACES = "0 only: face restoration is not offered here"
A1111_FIELDS = UpscaleFields(
    upscaler="upscaler_1", scale="upscaling_resize", width="upscaling_resize_w",
    height="upscaling_resize_h", upscaler_2="upscaler_2",
    upscaler_2_visibility="extras_upscaler_2_visibility",
)  # fmt: skip


class ExtrasIn(Schema):
    """A1111's extras fields; its others (show_extras_results, upscale_first) are accepted and
    ignored."""

    model_config = ConfigDict(extra="ignore")

    resize_mode: int = Field(0, ge=0, le=1, description="0: by upscaling_resize; 1: to _w x _h")
    upscaling_resize: Annotated[float, Field(gt=1), AtMost("GEN_MAX_SIDE")] = Field(
        2.0, description="resize_mode 0: the result's scale, above 1"
    )
    upscaling_resize_w: Annotated[int, Field(ge=1), AtMost("GEN_MAX_SIDE")] = Field(
        512, description="resize_mode 1: the result's width"
    )
    upscaling_resize_h: Annotated[int, Field(ge=1), AtMost("GEN_MAX_SIDE")] = Field(
        512, description="resize_mode 1: the result's height"
    )
    upscaling_crop: bool = Field(True, description="resize_mode 1: cut the centre to the size")
    upscaler_1: str = Field(
        "None", min_length=1, max_length=200,
        description="an /upscalers name; None: Lanczos, as A1111",
    )  # fmt: skip
    upscaler_2: str = Field(
        "None", max_length=200, description="blended over upscaler_1's result; None: none"
    )
    extras_upscaler_2_visibility: float = Field(
        0.0, ge=0, le=1, description="upscaler_2's weight, 0 to 1"
    )
    gfpgan_visibility: float = Field(0.0, ge=0, le=0, description=NO_FACES)
    codeformer_visibility: float = Field(0.0, ge=0, le=0, description=NO_FACES)


class SingleIn(ExtrasIn):
    image: str = Field(description="the image, base64 (a `data:` prefix allowed)")


class BatchItem(Schema):
    model_config = ConfigDict(extra="ignore")

    data: str = Field(description="an image, base64 (a `data:` prefix allowed)")
    name: str = ""


class BatchIn(ExtrasIn):
    imageList: list[BatchItem] = Field(min_length=1, description="the images")


class SingleOut(Schema):
    html_info: str
    image: str


class BatchOut(Schema):
    html_info: str
    images: list[str]


def upscale_of(request: HttpRequest, payload: ExtrasIn, data: str, field: str) -> GenerationRequest:
    sized = payload.resize_mode == SCALE_TO
    return services.upscale_request(
        current_backend(), image=decode_base64(data, field=field), seen_by=seen_by(request),
        upscaler=payload.upscaler_1,
        scale=None if sized else payload.upscaling_resize,
        width=payload.upscaling_resize_w if sized else None,
        height=payload.upscaling_resize_h if sized else None,
        crop=payload.upscaling_crop, upscaler_2=payload.upscaler_2,
        upscaler_2_visibility=payload.extras_upscaler_2_visibility,
        fields=UpscaleFields(**{**A1111_FIELDS.__dict__, "image": field}),
    )  # fmt: skip


def html_info(record: ImageRecord) -> str:
    return f"<p>{html.escape(record.parameters.a1111_text())}</p>"


@router.post(
    "/extra-single-image",
    auth=auth,
    response={200: SingleOut, **errors(400, 409, 413, 429, 500, 503, 504)},
    summary="A1111 extras: upscale one image (a job like POST /upscale's)",
)
def extra_single_image(request: HttpRequest, payload: SingleIn):
    admit(request, 1)  # before the image is decoded
    upscale = upscale_of(request, payload, payload.image, "image")
    [record] = run_for_client(request, upscale, count=1, admitted=True)
    return SingleOut(html_info=html_info(record), image=png_base64(record))


@router.post(
    "/extra-batch-images",
    auth=auth,
    response={200: BatchOut, **errors(400, 409, 413, 429, 500, 503, 504)},
    summary="A1111 extras: upscale each image of imageList (a job each, in order)",
)
def extra_batch_images(request: HttpRequest, payload: BatchIn):
    """Every image is checked and stored before the first job is queued: one refused image
    queues none (and leaves none of the others' inputs behind)."""
    admit(request, len(payload.imageList))
    upscales: list[GenerationRequest] = []
    try:
        for index, item in enumerate(payload.imageList):
            upscales.append(upscale_of(request, payload, item.data, f"imageList.{index}.data"))
    except FieldError:
        for made in upscales:
            services.inputs_release(current_backend(), made)
        raise
    records: list[ImageRecord] = []
    for upscale in upscales:
        records += run_for_client(request, upscale, count=1, admitted=True)
    return BatchOut(
        html_info=html_info(records[0]) if records else "",
        images=[png_base64(record) for record in records],
    )
