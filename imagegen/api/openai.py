"""The OpenAI-compatible images API (`/v1`): what the openai SDK and Open WebUI's "OpenAI"
engine send, translated into the service's own request and answered in OpenAI's shapes.

A thin translator: the generation is services.generation_run_shared, the same queue and
jobs as POST /generate; errors take OpenAI's shape in config/errors.py (by path).
"""

import time
from typing import Any, Literal
from urllib.parse import quote

from django.conf import settings
from django.http import FileResponse, HttpRequest
from ninja import Field, Query, Router, Schema
from pydantic import ConfigDict, field_validator

from config.auth import public_origin, token_required
from config.openapi import png_answer
from config.text import NOT_BLANK, NotBlank
from imagegen import selectors
from imagegen.api.protocol import png_base64, run_for_client
from imagegen.api.schemas import PROMPT_MAX, check_size, parse_size, size_pattern
from imagegen.api.schemas import errors as declared_errors
from imagegen.generation.images import ImageRecord
from imagegen.generation.render import SEED_MAX, GenerationRequest

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


class ImageGenerationIn(Schema):
    """OpenAI's `images.generate` body. Keys this service does not know are ignored: clients
    of compatible servers send extras (`background`, `moderation`, ...), and refusing them
    would break those clients. `model`, `quality`, `style` and `user` are accepted and
    change nothing (the configured model makes every image)."""

    model_config = ConfigDict(extra="ignore")

    prompt: NotBlank = Field(
        min_length=1, max_length=PROMPT_MAX, description=f"required; {NOT_BLANK}"
    )
    model: str | None = Field(None, description="any name; the configured model answers")
    n: int | None = Field(None, ge=1, le=settings.GEN_MAX_N, description="default 1")
    size: str | None = Field(
        None,
        json_schema_extra=_size_schema,
        description=f"WIDTHxHEIGHT (multiples of 8, {settings.GEN_MIN_SIDE} to "
        f"{settings.GEN_MAX_SIDE}) or auto: the model's native size (the default)",
    )
    response_format: Literal["b64_json", "url"] | None = Field(None, description="b64_json")
    quality: str | None = None
    style: str | None = None
    user: str | None = None
    output_format: Literal["png"] | None = Field(None, description="png only")
    negative_prompt: str | None = Field(None, max_length=PROMPT_MAX)
    steps: int | None = Field(None, ge=1, le=settings.GEN_MAX_STEPS)
    guidance_scale: float | None = Field(
        None, ge=0, le=settings.GEN_MAX_GUIDANCE, allow_inf_nan=False
    )
    seed: int | None = Field(None, ge=0, le=SEED_MAX, description="image i gets seed + i")

    @field_validator("size")
    @classmethod
    def _size(cls, value: str | None) -> str | None:
        if value is None or value.strip().lower() == "auto":
            return None
        return check_size(value)

    def to_request(self) -> GenerationRequest:
        return GenerationRequest(
            prompt=self.prompt,
            negative_prompt=self.negative_prompt or None,
            steps=self.steps,
            guidance=self.guidance_scale,
            size=parse_size(self.size) if self.size else None,
            seed=self.seed,
        )


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


def _datum(request: HttpRequest, record: ImageRecord, response_format: str | None) -> ImageDatum:
    if response_format == "url":
        signature = selectors.image_link_signature(image_id=record.id)
        path = f"/v1/images/{record.id}.png?signature={quote(signature)}"
        return ImageDatum(url=public_origin(request) + path)
    return ImageDatum(b64_json=png_base64(record))


@router.post(
    "/images/generations",
    auth=token_required(),
    response={200: ImagesResponse, **errors(400, 409, 413, 500, 503, 504)},
    exclude_none=True,
    summary="OpenAI images.generate: n images, as base64 PNGs or signed links",
)
def images_generations(request: HttpRequest, payload: ImageGenerationIn):
    records = run_for_client(request, payload.to_request(), count=payload.n or 1)
    data = [_datum(request, record, payload.response_format) for record in records]
    return ImagesResponse(created=int(time.time()), data=data)


@router.get(
    "/images/{image_id}.png",
    response={200: None, **dict.fromkeys((400, 403, 404), OpenAIErrorBody)},
    summary="One generated PNG by its signed link (no token: the signature is the credential)",
    openapi_extra=png_answer("the PNG"),
)
def image_by_link(request: HttpRequest, image_id: str, signature: str = Query(...)):
    path = selectors.image_png_by_link(image_id=image_id, signature=signature)
    return FileResponse(path.open("rb"), content_type="image/png")


@router.get("/models", auth=token_required(), response={200: ModelList, **errors()})
def models(request: HttpRequest):
    """The one configured model (`created` is 0: not known)."""
    return ModelList(data=[Model(id=settings.MODEL_ID, created=0, owned_by="imagegen")])
