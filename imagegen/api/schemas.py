"""Request and response bodies of the image service; pydantic enforces the bounds.

Bounds come from settings (GEN_MAX_STEPS, GEN_MAX_GUIDANCE, GEN_MIN_SIDE, GEN_MAX_SIDE).
An empty form field counts as absent, as HTML forms send them; unknown fields are refused
so that a misspelt `step=50` is an error rather than a silent default.
"""

import re
from typing import Annotated, Any

from django.conf import settings
from ninja import Schema
from pydantic import BeforeValidator, ConfigDict, Field, field_validator

from config.timestamps import iso_ms
from imagegen.generation.images import ImageRecord, image_url
from imagegen.generation.jobs import JobProgress, JobView
from imagegen.generation.render import SEED_MAX, GenerationRequest

PROMPT_MAX = 1000
_SIZE = re.compile(r"^(\d{1,5})x(\d{1,5})$")


def _blank_is_absent(value: Any) -> Any:
    return None if isinstance(value, str) and not value.strip() else value


Optional = BeforeValidator(_blank_is_absent)


class GenerateForm(Schema):
    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(min_length=1, max_length=PROMPT_MAX)
    negative_prompt: Annotated[Annotated[str, Field(max_length=PROMPT_MAX)] | None, Optional] = None
    steps: Annotated[Annotated[int, Field(ge=1, le=settings.GEN_MAX_STEPS)] | None, Optional] = None
    guidance: Annotated[
        Annotated[float, Field(ge=0, le=settings.GEN_MAX_GUIDANCE, allow_inf_nan=False)] | None,
        Optional,
    ] = None
    size: Annotated[str | None, Optional] = Field(
        default=None, description="WIDTHxHEIGHT, multiples of 8; default the model's native size"
    )
    seed: Annotated[Annotated[int, Field(ge=0, le=SEED_MAX)] | None, Optional] = None
    force_cpu: Annotated[bool, BeforeValidator(lambda v: _blank_is_absent(v) or False)] = False

    @field_validator("prompt")
    @classmethod
    def _prompt_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must contain a non-space character")
        return value

    @field_validator("size")
    @classmethod
    def _size(cls, value: str | None) -> str | None:
        if value is None:
            return None
        match = _SIZE.match(value.strip().lower())
        if not match:
            raise ValueError("must be WIDTHxHEIGHT, e.g. 1024x1024")
        low, high = settings.GEN_MIN_SIDE, settings.GEN_MAX_SIDE
        for side in map(int, match.groups()):
            if side % 8:
                raise ValueError(f"width and height must be multiples of 8, got {side}")
            if not low <= side <= high:
                raise ValueError(f"width and height must be between {low} and {high}, got {side}")
        return f"{match.group(1)}x{match.group(2)}"

    @classmethod
    def unknown_fields(cls, names: list[str]) -> list[dict[str, str]]:
        """Pydantic errors for form fields this schema does not have (Ninja drops them)."""
        return [
            {"loc": ("form", name), "msg": "is not a field of this form", "type": "extra"}
            for name in names
            if name not in cls.model_fields
        ]

    def to_request(self) -> GenerationRequest:
        size = tuple(int(s) for s in self.size.split("x")) if self.size else None
        return GenerationRequest(
            prompt=self.prompt,
            negative_prompt=self.negative_prompt,
            steps=self.steps,
            guidance=self.guidance,
            size=size,
            seed=self.seed,
            force_cpu=self.force_cpu,
        )


class Health(Schema):
    status: str
    device: str
    version: str


class ImageError(Schema):
    message: str
    details: list[dict[str, str]] | None = None


class ImageErrorBody(Schema):
    error: ImageError


class ImagePage(Schema):
    items: list[ImageRecord]
    next: str | None = Field(description="the next page, newest first; null on the last")


class JobOut(Schema):
    """A JobView as answered: timestamps in the project's one form, and the image's URL."""

    id: str
    state: str = Field(description="queued, running, succeeded, failed or cancelled")
    position: int | None = Field(description="1 = runs next; null unless queued")
    phase: str
    progress: JobProgress
    parameters: GenerationRequest
    created_at: str
    started_at: str | None
    finished_at: str | None
    error: str | None
    image: ImageRecord | None
    image_url: str | None

    @staticmethod
    def resolve_created_at(job: JobView) -> str:
        return iso_ms(job.created_at)

    @staticmethod
    def resolve_started_at(job: JobView) -> str | None:
        return iso_ms(job.started_at)

    @staticmethod
    def resolve_finished_at(job: JobView) -> str | None:
        return iso_ms(job.finished_at)

    @staticmethod
    def resolve_image_url(job: JobView) -> str | None:
        return image_url(job.image.id) if job.image else None
