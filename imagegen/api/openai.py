"""The OpenAI-compatible images API (`/v1`): what the openai SDK and Open WebUI's "OpenAI"
engine send, translated into the service's own request and answered in OpenAI's shapes.

A thin translator: the generation is services.generation_run_shared, the same queue and
jobs as POST /generate; an edit is services.edit_request, the same rules as POST /generate's
image part, with OpenAI's mask (transparent repaints) turned into the service's own (white
repaints) on the way in; errors take OpenAI's shape (imagegen/api/errors.py).
"""

import base64
import io
import time
from typing import Annotated, Any, Literal

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from ninja import Field, Query, Router, Schema
from ninja.errors import ValidationError
from PIL import ImageOps
from pydantic import ConfigDict, field_validator
from pydantic import ValidationError as PydanticError

from apikeys.auth import (
    client_identity,
    owner_key,
    queue_limit,
    stream_key,
    token_required,
)
from core.errors import FieldError
from core.openapi import form_request_body, plain_optional
from core.text import NOT_BLANK, NotBlank
from imagegen import selectors, services
from imagegen.api.bounds import AtMost
from imagegen.api.openai_stream import EDIT, GENERATION, streamed_image
from imagegen.api.protocol import admit, run_for_client, signed_image_link
from imagegen.api.schemas import (
    PROMPT_MAX,
    BlankIsAbsent,
    Integer,
    Number,
    Optional,
    OptionalGuidance,
    OptionalSteps,
    check_size,
    parse_size,
    size_pattern,
)
from imagegen.api.schemas import errors as declared_errors
from imagegen.backend import current_backend
from imagegen.errors import ModelNotOffered
from imagegen.generation.catalog import UnknownModel
from imagegen.generation.edit_inputs import INPUT_PIXELS_FACTOR, read_image
from imagegen.generation.images import ImageRecord
from imagegen.generation.output_formats import MEDIA_TYPES, OutputFormat, encoded
from imagegen.generation.presets import QUALITIES
from imagegen.generation.requests import (
    MASK_BLUR_DEFAULT,
    MASK_BLUR_MAX,
    SEED_MAX,
    STRENGTH_DEFAULT,
    GenerationRequest,
)

router = Router(tags=["openai"])


class OpenAIError(Schema):
    message: str
    type: str
    param: str | None
    code: str | None
    details: list[dict[str, str]] | None = Field(None, description="on a validation error")


class OpenAIErrorBody(Schema):
    error: OpenAIError


def errors(*statuses: int) -> dict[int, type[Schema]]:
    return declared_errors(*statuses, body=OpenAIErrorBody)


def _size_schema(schema: dict[str, Any]) -> None:
    sides = size_pattern(settings.GEN_MIN_SIDE, settings.GEN_MAX_SIDE)[1:-1]
    schema.update(type="string", pattern=f"^(?:auto|{sides})$")
    schema.pop("anyOf", None)
    schema.pop("default", None)


def _size(value: str | None) -> str | None:
    """`auto` (or none): the model's native size, or an edit's input's."""
    if value is None or value.strip().lower() == "auto":
        return None
    return check_size(value)


OUTPUT_FORMAT = "png, jpeg or webp; the stored image stays the PNG"
OUTPUT_COMPRESSION = (
    "0 to 100: jpeg's and webp's quality (100, the default, the best picture and the largest "
    "file); a PNG is lossless, so it changes nothing there"
)


QUALITY = (
    "the recipe, when `steps` is not sent: low (half the model's default steps, at least 1), "
    "medium (its defaults; also auto and dall-e-3's standard), high (1.5 times its default "
    "steps, within the cap of a few-step model; also dall-e-3's hd); default medium"
)


def _quality_schema(schema: dict[str, Any]) -> None:
    """The values as an enum (any case is taken too)."""
    options = [option for option in schema.pop("anyOf", ()) if option.get("type") != "null"]
    schema.update(options[0] if options else {"type": "string"})
    schema["enum"] = list(QUALITIES)
    schema.pop("default", None)


def _quality(value: str | None) -> str | None:
    """The recipe a `quality` names (imagegen.generation.presets.QUALITIES)."""
    if value is None:
        return None
    recipe = QUALITIES.get(value.strip().lower())
    if recipe is None:
        raise ValueError(f"must be one of {', '.join(QUALITIES)}; got {value!r}")
    return recipe


MODEL = (
    "an offered model (GET /v1/models: its repo id, or its name part where that is unique); "
    "none, dall-e-2, dall-e-3 or gpt-image-*: MODEL_ID. With MODELS unset any name runs "
    "MODEL_ID; with it set another name is a 400 listing the offered ids"
)
# OpenAI's own model names, which clients hard-code: they run MODEL_ID.
OPENAI_NAMES = ("dall-e-2", "dall-e-3")
OPENAI_PREFIX = "gpt-image-"


def is_openai_name(name: str) -> bool:
    wanted = name.strip().lower()
    return wanted in OPENAI_NAMES or wanted.startswith(OPENAI_PREFIX)


def chosen_model(generation: GenerationRequest, name: str | None) -> GenerationRequest:
    """`generation` run by the model `name` picks. With MODELS unset any name (or none) runs
    MODEL_ID, as clients that send `dall-e-3` expect of a one-model service. With MODELS set,
    an offered model's repo id or unique name part runs that model, OpenAI's own names and
    none run MODEL_ID, and any other name is a 400 naming `model` and listing the offered
    ids, before anything is stored or queued (services.with_model: in distributed mode a
    MODELS entry is a 501)."""
    backend = current_backend()
    offered = backend.offered()
    if not offered.several or name is None or not name.strip():
        return services.with_loras(backend, generation)
    try:
        model = offered.find(name)
    except UnknownModel:
        if is_openai_name(name):
            return services.with_loras(backend, generation)
        raise
    return services.with_model(backend, generation.model_copy(update={"model": model.id}))


PARTIALS_MAX = 3
STREAM = (
    "true: Server-Sent Events as the openai SDK reads them (`partial_images` previews, then "
    "the completed image); n must be 1"
)
PARTIAL_IMAGES = (
    "0 to 3, with stream: previews of the image as it forms, spread over the steps (a job of "
    "fewer steps than partial_images + 1 sends fewer; none with PREVIEW=off)"
)


ONE_PER_STREAM = "must be 1 with stream: true (one image per stream)"


def one_image_streamed(form: "ImageGenerationIn | ImageEditForm") -> None:
    if (form.n or 1) != 1:
        raise FieldError("n", ONE_PER_STREAM)


class ImageGenerationIn(Schema):
    """OpenAI's `images.generate` body. Keys this service does not know are ignored: clients
    of compatible servers send extras (`background`, `moderation`, ...), and refusing them
    would break those clients. `model` picks an offered model (chosen_model);
    `quality`, `style` and `user` are accepted and change nothing."""

    model_config = ConfigDict(extra="ignore")

    prompt: NotBlank = Field(
        min_length=1, max_length=PROMPT_MAX, description=f"required; {NOT_BLANK}"
    )
    model: str | None = Field(None, description=MODEL)
    n: Annotated[int, Field(ge=1), AtMost("GEN_MAX_N")] | None = Field(
        None, description="default 1"
    )
    size: str | None = Field(
        None,
        json_schema_extra=_size_schema,
        description=f"WIDTHxHEIGHT (multiples of 8, {settings.GEN_MIN_SIDE} to "
        f"{settings.GEN_MAX_SIDE}) or auto: the model's native size (the default)",
    )
    response_format: Literal["b64_json", "url"] | None = Field(None, description="b64_json")
    quality: str | None = Field(None, description=QUALITY, json_schema_extra=_quality_schema)
    style: str | None = None
    user: str | None = None
    output_format: OutputFormat | None = Field(None, description=OUTPUT_FORMAT)
    output_compression: int | None = Field(None, ge=0, le=100, description=OUTPUT_COMPRESSION)
    negative_prompt: str | None = Field(None, max_length=PROMPT_MAX)
    steps: Annotated[int, Field(ge=1), AtMost("GEN_MAX_STEPS")] | None = Field(None)
    guidance_scale: Annotated[float, Field(ge=0), AtMost("GEN_MAX_GUIDANCE")] | None = Field(
        None, allow_inf_nan=False
    )
    seed: int | None = Field(None, ge=0, le=SEED_MAX, description="image i gets seed + i")
    stream: bool | None = Field(None, description=STREAM)
    partial_images: int | None = Field(None, ge=0, le=PARTIALS_MAX, description=PARTIAL_IMAGES)

    _check_size = field_validator("size")(_size)
    _check_quality = field_validator("quality")(_quality)

    def to_request(self) -> GenerationRequest:
        return GenerationRequest(
            prompt=self.prompt,
            negative_prompt=self.negative_prompt or None,
            steps=self.steps,
            guidance=self.guidance_scale,
            size=parse_size(self.size) if self.size else None,
            seed=self.seed,
            quality=self.quality,
        )


class ImageEditForm(Schema):
    """OpenAI's `images.edit` form fields; the image and the mask are file parts beside them
    (EDIT_PARTS). As on generations, fields this service does not know are ignored (the SDK
    sends `background`, `input_fidelity`, `quality`, ... and clients of compatible servers
    more); an empty field counts as absent, as HTML forms send them."""

    model_config = ConfigDict(extra="ignore")

    prompt: NotBlank = Field(
        min_length=1, max_length=PROMPT_MAX, description=f"required; {NOT_BLANK}"
    )
    model: Annotated[str | None, *Optional] = Field(None, description=MODEL)
    n: Annotated[Annotated[int, Field(ge=1), AtMost("GEN_MAX_N"), Integer] | None, *Optional] = (
        Field(None, description="default 1")
    )
    size: Annotated[str | None, BlankIsAbsent] = Field(
        None,
        json_schema_extra=_size_schema,
        description=f"WIDTHxHEIGHT (multiples of 8, {settings.GEN_MIN_SIDE} to "
        f"{settings.GEN_MAX_SIDE}) or auto: the input's size, each side rounded down to a "
        "multiple of 8 (the default)",
    )
    response_format: Annotated[Literal["b64_json", "url"] | None, *Optional] = Field(
        None, description="b64_json"
    )
    output_format: Annotated[OutputFormat | None, *Optional] = Field(
        None, description=OUTPUT_FORMAT
    )
    output_compression: Annotated[
        Annotated[int, Field(ge=0, le=100), Integer] | None, *Optional
    ] = Field(None, description=OUTPUT_COMPRESSION)
    negative_prompt: Annotated[Annotated[str, Field(max_length=PROMPT_MAX)] | None, *Optional] = (
        None
    )
    steps: OptionalSteps = None
    guidance_scale: OptionalGuidance = None
    seed: Annotated[Annotated[int, Field(ge=0, le=SEED_MAX), Integer] | None, *Optional] = Field(
        None, description="image i gets seed + i"
    )
    strength: Annotated[
        Annotated[float, Field(gt=0, le=1, allow_inf_nan=False), Number] | None, *Optional
    ] = Field(
        None,
        description=f"how far the image is noised (0 < s <= 1); max(1, int(steps x s)) steps "
        f"run; default {STRENGTH_DEFAULT}",
    )
    mask_blur: Annotated[
        Annotated[int, Field(ge=0, le=MASK_BLUR_MAX), Integer] | None, *Optional
    ] = Field(
        None,
        description=f"the mask's edge blurred by this many pixels; pixels farther than twice "
        f"that from the repainted area are the input's exactly; default {MASK_BLUR_DEFAULT}",
    )
    stream: Annotated[bool | None, *Optional] = Field(None, description=STREAM)
    partial_images: Annotated[
        Annotated[int, Field(ge=0, le=PARTIALS_MAX), Integer] | None, *Optional
    ] = Field(None, description=PARTIAL_IMAGES)

    quality: Annotated[str | None, *Optional] = Field(
        None, description=QUALITY, json_schema_extra=_quality_schema
    )

    _check_size = field_validator("size")(_size)
    _check_quality = field_validator("quality")(_quality)

    @classmethod
    def of(cls, request: HttpRequest) -> "ImageEditForm":
        """The form's text fields, refused as a schema refuses a body (a 400 naming each)."""
        try:
            return cls.model_validate(request.POST.dict())
        except PydanticError as error:
            raise ValidationError(
                [{**e, "loc": ("form", *e["loc"])} for e in error.errors()]
            ) from None

    def to_request(self) -> GenerationRequest:
        return GenerationRequest(
            prompt=self.prompt,
            negative_prompt=self.negative_prompt,
            steps=self.steps,
            guidance=self.guidance_scale,
            size=parse_size(self.size) if self.size else None,
            seed=self.seed,
            quality=self.quality,
        )


EDIT_PARTS = {
    "image": "the picture to edit: one file (PNG, JPEG or WebP); sent as `image[]` (as the "
    "openai SDK sends a list) it is taken too, but more than one image is refused",
    "mask": "optional; the image's size, with an alpha channel: its transparent pixels mark "
    "what to repaint (OpenAI's mask), opaque ones what to keep",
}
IMAGE_PARTS = ("image", "image[]")
ONE_IMAGE = "only one image is supported: this service edits one picture at a time"
MASK_NEEDS_ALPHA = (
    "must have an alpha channel: its transparent pixels mark what to repaint, as OpenAI's mask does"
)
ALPHA_MODES = ("RGBA", "RGBa", "LA", "La", "PA")


def edit_body() -> dict[str, Any]:
    """The route's requestBody: multipart only (an image cannot travel urlencoded), `image`
    required beside `prompt`, other fields allowed (they are ignored)."""
    multipart = form_request_body(ImageEditForm, EDIT_PARTS)["content"]["multipart/form-data"]
    schema = multipart["schema"]
    schema.update(required=[*schema["required"], "image"], additionalProperties=True)
    return {"required": True, "content": {"multipart/form-data": multipart}}


def edit_files(request: HttpRequest) -> tuple[bytes, bytes | None]:
    """The image's bytes and the mask's (None without one), or a FieldError naming the part."""
    images = [part for name in IMAGE_PARTS for part in request.FILES.getlist(name)]
    if not images:
        sent_as_text = any(name in request.POST for name in IMAGE_PARTS)
        raise FieldError("image", "must be a file part" if sent_as_text else "is required")
    if len(images) > 1:
        raise FieldError("image", f"{ONE_IMAGE}; got {len(images)}")
    masks = request.FILES.getlist("mask")
    if len(masks) > 1:
        raise FieldError("mask", f"only one mask; got {len(masks)}")
    if not masks and "mask" in request.POST:
        raise FieldError("mask", "must be a file part")
    return images[0].read(), masks[0].read() if masks else None


def repaint_mask(data: bytes) -> bytes:
    """OpenAI's mask as the service's own (white repaints, black keeps, grey blends): a
    pixel of alpha a becomes 255 - a, so a transparent pixel is repainted, an opaque one
    kept, and a half-transparent one blended. Colours are not read."""
    high = settings.GEN_MAX_SIDE
    image = read_image(data, field="mask", max_pixels=INPUT_PIXELS_FACTOR * high * high)
    if image.mode not in ALPHA_MODES and "transparency" not in image.info:
        raise FieldError("mask", MASK_NEEDS_ALPHA)
    buffer = io.BytesIO()
    ImageOps.invert(image.convert("RGBA").getchannel("A")).save(buffer, format="PNG")
    return buffer.getvalue()


class ImageDatum(Schema):
    b64_json: str | None = None
    url: str | None = None


class ImagesResponse(Schema):
    created: int
    data: list[ImageDatum]


class Model(Schema):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class ModelList(Schema):
    object: Literal["list"] = "list"
    data: list[Model]


def images_response(
    request: HttpRequest, records: list[ImageRecord], form: ImageGenerationIn | ImageEditForm
) -> ImagesResponse:
    """Each image as base64 or as a signed link, in the output format asked for."""
    data = []
    for record in records:
        if form.response_format == "url":
            output_format, compression = None, None
            if form.output_format not in (None, "png"):  # the link re-encodes it too
                output_format, compression = form.output_format, form.output_compression
            link = signed_image_link(
                request, record.id, output_format=output_format, compression=compression
            )
            data.append(ImageDatum(url=link))
        else:
            png = selectors.image_png(current_backend(), image_id=record.id).read_bytes()
            image = encoded(png, form.output_format, form.output_compression)
            data.append(ImageDatum(b64_json=base64.b64encode(image).decode()))
    return ImagesResponse(created=int(time.time()), data=data)


@router.post(
    "/images/generations",
    auth=token_required(),
    response={200: ImagesResponse, **errors(400, 409, 413, 429, 500, 503, 504)},
    exclude_none=True,
    summary="OpenAI images.generate: n images, as base64 PNGs or signed links; stream: SSE",
)
def images_generations(request: HttpRequest, payload: ImageGenerationIn):
    generation = chosen_model(payload.to_request(), payload.model)
    if payload.stream:
        one_image_streamed(payload)
        admit(request, 1)  # an API key's limits, as run_for_client applies them
        return streamed_image(
            generation, client=client_identity(request), prefix=GENERATION,
            key=owner_key(request), key_limit=queue_limit(request), stream_key=stream_key(request),
            partials=payload.partial_images or 0, output_format=payload.output_format,
            compression=payload.output_compression,
        )  # fmt: skip
    records = run_for_client(request, generation, count=payload.n or 1)
    return images_response(request, records, payload)


@router.post(
    "/images/edits",
    auth=token_required(),
    response={200: ImagesResponse, **errors(400, 409, 413, 429, 500, 503, 504)},
    exclude_none=True,
    summary="OpenAI images.edit: n edits of one image (with a mask, only its transparent area)",
    openapi_extra={"requestBody": edit_body()},
)
def images_edits(request: HttpRequest):
    form = ImageEditForm.of(request)
    if form.stream:
        one_image_streamed(form)
    admit(request, 1 if form.stream else form.n or 1)  # before the images are decoded
    image, mask = edit_files(request)
    generation = services.edit_request(
        current_backend(), request=chosen_model(form.to_request(), form.model), image=image,
        mask=None if mask is None else repaint_mask(mask),
        strength=form.strength, mask_blur=form.mask_blur,
    )  # fmt: skip
    if form.stream:
        return streamed_image(
            generation, client=client_identity(request), prefix=EDIT, key=owner_key(request),
            key_limit=queue_limit(request), stream_key=stream_key(request),
            partials=form.partial_images or 0,
            output_format=form.output_format, compression=form.output_compression,
        )  # fmt: skip
    records = run_for_client(request, generation, count=form.n or 1, admitted=True)
    return images_response(request, records, form)


class LinkQuery(Schema):
    """A signed link's query: its signature, and the format of the answer that made it (which
    the signature covers too)."""

    signature: str
    output_format: OutputFormat | None = Field(
        None, description=OUTPUT_FORMAT, json_schema_extra=plain_optional
    )
    output_compression: int | None = Field(
        None, ge=0, le=100, description=OUTPUT_COMPRESSION, json_schema_extra=plain_optional
    )


@router.get(
    "/images/{image_id}.png",
    response={200: None, **dict.fromkeys((400, 403, 404), OpenAIErrorBody)},
    summary="One generated image by its signed link (no token: the signature is the credential)",
    openapi_extra={
        "responses": {
            200: {
                "description": "the PNG, or the format the answer that made the link asked for",
                "content": {
                    media_type: {"schema": {"type": "string", "format": "binary"}}
                    for media_type in MEDIA_TYPES.values()
                },
            }
        }
    },
)
def image_by_link(request: HttpRequest, image_id: str, query: Query[LinkQuery]):
    path = selectors.image_png_by_link(
        current_backend(),
        image_id=image_id,
        signature=query.signature,
        output_format=query.output_format,
        compression=query.output_compression,
    )
    image = encoded(path.read_bytes(), query.output_format, query.output_compression)
    return HttpResponse(image, content_type=MEDIA_TYPES[query.output_format or "png"])


def listed(model_id: str) -> Model:
    """An offered model as OpenAI lists one (`created` is 0: not known)."""
    return Model(id=model_id, created=0, owned_by="imagegen")


@router.get("/models", auth=token_required(), response={200: ModelList, **errors()})
def models(request: HttpRequest):
    """Every offered model, MODEL_ID's first, each by its repo id."""
    return ModelList(data=[listed(model_id) for model_id in current_backend().offered().ids])


@router.get(
    "/models/{path:model}",
    auth=token_required(),
    response={200: Model, **errors(404)},
    summary="One offered model, by its repo id (the slash as it is or as %2F) or name part",
)
def model(request: HttpRequest, model: str):
    offered = current_backend().offered()
    try:
        return listed(offered.find(model).id)
    except UnknownModel:
        raise ModelNotOffered(model, offered.ids) from None
