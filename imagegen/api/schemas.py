"""Request and response bodies of the image service; pydantic enforces the bounds.

Bounds come from settings (GEN_MAX_STEPS, GEN_MAX_GUIDANCE, GEN_MIN_SIDE, GEN_MAX_SIDE).
An empty form field counts as absent, as HTML forms send them; unknown fields are refused
so that a misspelt `step=50` is an error rather than a silent default.
"""

import math
import re
from typing import Annotated, Any

from django.conf import settings
from ninja import Schema
from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
)
from pydantic_core import PydanticCustomError

from apikeys.auth import sees_owners
from core.errors import FieldError
from core.openapi import plain_optional
from core.text import NOT_BLANK, NotBlank, is_blank
from core.timestamps import iso_ms
from imagegen import selectors
from imagegen.api.bounds import AtMost
from imagegen.backend import current_backend
from imagegen.generation.hires import TXT2IMG_ONLY, hires_upscaler_names
from imagegen.generation.images import ImageRecord, image_url
from imagegen.generation.job_board import JobProgress, JobView
from imagegen.generation.parameters import working_size
from imagegen.generation.prompt_tags import LoraTag, lora_field
from imagegen.generation.requests import (
    EDIT_ONLY,
    MASK_BLUR_DEFAULT,
    MASK_BLUR_MAX,
    MASK_NEEDS_IMAGE,
    MASK_ONLY,
    ONLY_MASKED_ONLY,
    ONLY_MASKED_PADDING_DEFAULT,
    ONLY_MASKED_PADDING_MAX,
    SEED_MAX,
    STRENGTH_DEFAULT,
    EditRequest,
    GenerationRequest,
    edit_settings,
)
from imagegen.generation.schedulers import A1111_NAMES, NAMES, scheduler_for_input
from imagegen.model.status import AdapterView, ModelStatus
from imagegen.selectors import SyncEstimate
from imagegen.services import HiresAsked

# What the native `scheduler` field lists: the table's ids, then A1111's name for each (what
# records and X-Scheduler answer, taken back in any case).
SCHEDULER_NAMES = [*NAMES, *A1111_NAMES]

PROMPT_MAX = 1000
_SIZE = re.compile(r"^([0-9]{1,5})x([0-9]{1,5})$", re.ASCII | re.IGNORECASE)
# What a form number may look like: ASCII digits only. Python's int() and float() also take
# other scripts' digits (full-width ones, say) and underscores ("2_0"), which no client
# means as numbers. The length is checked before the pattern, and each part of the pattern
# can match in one way only, so a long string costs no more than reading it once.
NUMBER_MAX_CHARS = 40
NUMBER_TOO_LONG = f"a number is at most {NUMBER_MAX_CHARS} characters"
_INTEGER = re.compile(r"^[+-]?[0-9]+$", re.ASCII)
_NUMBER = re.compile(r"^[+-]?(?:[0-9]++(?:\.[0-9]*+)?|\.[0-9]++)(?:[eE][+-]?[0-9]++)?$", re.ASCII)
_NOT_FINITE = {"nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity", "+infinity",
               "-infinity"}  # fmt: skip


def size_pattern(low: int, high: int) -> str:
    """The sizes the bounds allow, as a regular expression a client (or a fuzzer) can check:
    each side one of the multiples of 8 from `low` to `high`."""
    sides = "|".join(str(side) for side in range(high, low - 1, -8))
    return f"^(?:{sides})x(?:{sides})$"


def check_size(value: str) -> str:
    """`WIDTHxHEIGHT` as every protocol takes it: multiples of 8 within the bounds; a
    ValueError naming the rule otherwise."""
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


def parse_size(checked: str) -> tuple[int, int]:
    """The (width, height) of a size check_size passed."""
    width, height = checked.lower().split("x")
    return int(width), int(height)


def _size_schema(schema: dict[str, Any]) -> None:
    plain_optional(schema)
    schema["pattern"] = size_pattern(settings.GEN_MIN_SIDE, settings.GEN_MAX_SIDE)


def _scheduler_schema(schema: dict[str, Any]) -> None:
    plain_optional(schema)
    schema["enum"] = list(SCHEDULER_NAMES)


def _hires_upscaler_schema(schema: dict[str, Any]) -> None:
    plain_optional(schema)
    schema["enum"] = hires_upscaler_names(settings.UPSCALERS)


def _blank_is_absent(value: Any) -> Any:
    return None if isinstance(value, str) and is_blank(value) else value


def _bounded(value: str) -> str:
    """A form number's text without its surrounding spaces, refused past NUMBER_MAX_CHARS."""
    if len(value) > NUMBER_MAX_CHARS:
        raise PydanticCustomError("number_too_long", NUMBER_TOO_LONG)
    return value.strip()


def _ascii_integer(value: Any) -> Any:
    if isinstance(value, str) and not _INTEGER.match(_bounded(value)):
        raise PydanticCustomError(
            "int_parsing", "Input should be a valid integer, unable to parse string as an integer"
        )
    return value


def _ascii_number(value: Any) -> Any:
    if isinstance(value, str):
        text = _bounded(value)
        if not _NUMBER.match(text) and text.lower() not in _NOT_FINITE:
            raise PydanticCustomError(
                "float_parsing",
                "Input should be a valid number, unable to parse string as a number",
            )
    return value


# An optional form field: empty counts as absent, and it is documented without null.
BlankIsAbsent = BeforeValidator(_blank_is_absent)
Optional = (BlankIsAbsent, Field(json_schema_extra=plain_optional))
Integer = BeforeValidator(_ascii_integer)
Number = BeforeValidator(_ascii_number)
# The bounded steps and guidance of POST /generate, and of the estimate that asks about it.
OptionalSteps = Annotated[
    Annotated[int, Field(ge=1), AtMost("GEN_MAX_STEPS"), Integer] | None, *Optional
]
OptionalGuidance = Annotated[
    Annotated[float, Field(ge=0, allow_inf_nan=False), AtMost("GEN_MAX_GUIDANCE"), Number] | None,
    *Optional,
]


FILE_PARTS = ("image", "mask")  # the file parts POST /generate takes
HIRES_FIELDS = (
    "hires_scale", "hires_width", "hires_height", "hires_upscaler", "hires_steps",
    "hires_strength", "hires_prompt", "hires_negative_prompt",
)  # fmt: skip
HIRES_ONLY = "applies with hires=true only"


class GenerateForm(Schema):
    model_config = ConfigDict(extra="forbid")

    prompt: NotBlank = Field(
        min_length=1, max_length=PROMPT_MAX, description=f"required; {NOT_BLANK}"
    )
    negative_prompt: Annotated[Annotated[str, Field(max_length=PROMPT_MAX)] | None, *Optional] = (
        None
    )
    steps: OptionalSteps = None
    guidance: OptionalGuidance = None
    scheduler: Annotated[str | None, BeforeValidator(_blank_is_absent)] = Field(
        default=None,
        json_schema_extra=_scheduler_schema,
        description=(
            "default: the model's (its preset's, GEN_DEFAULT_SCHEDULER, or its own); "
            "*_trailing (A1111: SGM Uniform): the timestep spacing few-step models need"
        ),
    )
    size: Annotated[str | None, BeforeValidator(_blank_is_absent)] = Field(
        default=None,
        json_schema_extra=_size_schema,
        description=(
            f"WIDTHxHEIGHT, each side a multiple of 8 from {settings.GEN_MIN_SIDE} to "
            f"{settings.GEN_MAX_SIDE}; default the model's native size"
        ),
    )
    seed: Annotated[Annotated[int, Field(ge=0, le=SEED_MAX), Integer] | None, *Optional] = None
    force_cpu: Annotated[bool, BeforeValidator(lambda v: _blank_is_absent(v) or False)] = False
    model: Annotated[Annotated[str, Field(max_length=200)] | None, *Optional] = Field(
        default=None,
        description="an offered model (MODEL_ID or a MODELS entry) by repo id or unique name "
        "part; default MODEL_ID",
    )
    strength: Annotated[
        Annotated[float, Field(gt=0, le=1, allow_inf_nan=False), Number] | None, *Optional
    ] = Field(
        default=None,
        description=f"with an `image` file part: how far it is noised (0 < s <= 1), and "
        f"max(1, int(steps x s)) steps run; default {STRENGTH_DEFAULT}",
    )
    mask_blur: Annotated[
        Annotated[int, Field(ge=0, le=MASK_BLUR_MAX), Integer] | None, *Optional
    ] = Field(
        default=None,
        description=f"with a `mask` file part: its edge blurred by this many pixels; pixels "
        f"farther than twice that from the marked area are the input's exactly; default "
        f"{MASK_BLUR_DEFAULT}",
    )
    resize_mode: Annotated[Annotated[int, Integer] | None, *Optional] = Field(
        default=None,
        description="with an `image` file part and a `size` of another shape, how the image "
        "is brought to it (A1111's): 0 just resize (stretch), 1 crop and resize (cover, the "
        "overflow cut evenly), 2 resize and fill (fit, the bands filled by stretching its "
        "edges); any other value as 0; default 0",
    )
    only_masked: Annotated[bool, BeforeValidator(lambda v: _blank_is_absent(v) or False)] = Field(
        default=False,
        description="with a `mask` file part: only the marked area's box, grown by twice "
        "mask_blur and `only_masked_padding`, is worked (at `size` if sent, else at its own "
        "size rounded up to multiples of 8) and pasted back; the answer is the image's size",
    )
    only_masked_padding: Annotated[
        Annotated[int, Field(ge=0, le=ONLY_MASKED_PADDING_MAX), Integer] | None, *Optional
    ] = Field(
        default=None,
        description=f"with only_masked=true: pixels added around the marked area's box; "
        f"default {ONLY_MASKED_PADDING_DEFAULT}",
    )
    lora: Annotated[
        list[Annotated[str, Field(max_length=200)]] | None, Field(json_schema_extra=plain_optional)
    ] = Field(
        default=None,
        description="a LoRA to run, `name` or `name:weight` (weight 1 when absent, in "
        "[-4, 4]); repeat the field for several; runs beside the prompt's <lora:name:weight> "
        "tags, a LoRA named twice at the sum of its weights (JSON bodies: `loras`)",
    )
    webhook_url: Annotated[Annotated[str, Field(max_length=2048)] | None, *Optional] = Field(
        default=None,
        description="with async=true: an http(s) URL told when the job ends (a signed POST: "
        "job.succeeded, job.failed or job.cancelled); default the key's, else WEBHOOK_URL",
    )
    hires: Annotated[bool, BeforeValidator(lambda v: _blank_is_absent(v) or False)] = Field(
        default=False,
        description="text-to-image only: the hires fix, a first pass at `size` (default the "
        "model's native size), upscaled, then an img2img at the result's size; the hires_* "
        "fields tune it (in JSON, `hires` may be an object of them without the prefix)",
    )
    hires_scale: Annotated[
        Annotated[float, Field(gt=1, allow_inf_nan=False), Number] | None, *Optional
    ] = Field(default=None, description="with hires=true: the result's scale, above 1; default 2")
    hires_width: Annotated[
        Annotated[int, Field(ge=0), AtMost("GEN_MAX_SIDE"), Integer] | None, *Optional
    ] = Field(
        default=None,
        description="with hires=true: the result's width instead of a scale (0 or absent: from "
        "the height at the first pass's shape)",
    )
    hires_height: Annotated[
        Annotated[int, Field(ge=0), AtMost("GEN_MAX_SIDE"), Integer] | None, *Optional
    ] = Field(default=None, description="with hires=true: the result's height instead of a scale")
    hires_upscaler: Annotated[Annotated[str, Field(max_length=200)] | None, *Optional] = Field(
        default=None,
        json_schema_extra=_hires_upscaler_schema,
        description="with hires=true: a latent mode (GET /sdapi/v1/latent-upscale-modes) or an "
        "upscaler (GET /sdapi/v1/upscalers), any case; default Latent",
    )
    hires_steps: Annotated[
        Annotated[int, Field(ge=0), AtMost("GEN_MAX_STEPS"), Integer] | None, *Optional
    ] = Field(default=None, description="with hires=true: the second pass's steps; default "
              "(and 0) the first pass's")  # fmt: skip
    hires_strength: Annotated[
        Annotated[float, Field(gt=0, le=1, allow_inf_nan=False), Number] | None, *Optional
    ] = Field(
        default=None,
        description="with hires=true: how far the second pass noises the upscaled picture, "
        "0 < s <= 1; default 0.7",
    )
    hires_prompt: Annotated[Annotated[str, Field(max_length=PROMPT_MAX)] | None, *Optional] = Field(
        default=None, description="with hires=true: the second pass's; default the prompt"
    )
    hires_negative_prompt: Annotated[
        Annotated[str, Field(max_length=PROMPT_MAX)] | None, *Optional
    ] = Field(default=None, description="with hires=true: the second pass's negative prompt")

    @field_validator("scheduler")
    @classmethod
    def _scheduler(cls, value: str | None) -> str | None:
        return None if value is None else scheduler_for_input(value.strip())

    @field_validator("size")
    @classmethod
    def _size(cls, value: str | None) -> str | None:
        return None if value is None else check_size(value)

    @classmethod
    def unknown_fields(cls, names: list[str], files: list[str]) -> list[dict[str, Any]]:
        """Pydantic errors for form fields this schema does not have (Ninja drops them), for
        file parts other than `image` and `mask`, one of those twice, a `mask` without an
        `image`, and a text field where a file part belongs."""
        refused = [
            {"loc": ("form", name), "msg": "must be a file part", "type": "extra"}
            if name in FILE_PARTS
            else {"loc": ("form", name), "msg": "is not a field of this form", "type": "extra"}
            for name in names
            if name not in cls.model_fields
        ] + [
            {"loc": ("form", name), "msg": "is a file; this form takes text fields, and the "
             "file parts `image` and `mask`", "type": "extra"}
            for name in files
            if name not in FILE_PARTS
        ]  # fmt: skip
        refused += [
            {"loc": ("form", name), "msg": "only one file part of this name", "type": "extra"}
            for name in FILE_PARTS
            if files.count(name) > 1
        ]
        if "mask" in files and "image" not in files:
            refused.append({"loc": ("form", "mask"), "msg": MASK_NEEDS_IMAGE, "type": "extra"})
        return refused

    def lora_fields(self) -> list[LoraTag]:
        """The LoRAs of the `lora` fields (an empty one, as HTML forms send, is absent), each
        checked as a prompt's tag is (imagegen.generation.prompt_tags)."""
        return [lora_field(text) for text in self.lora or () if text.strip()]

    def check_edit_fields(self, *, editing: bool, masking: bool = False) -> None:
        """An edit's fields sent without an image (only_masked: without a mask; its
        padding: without only_masked) would be ignored silently, so they are refused."""
        for name in ("strength", "mask_blur", "resize_mode"):
            if getattr(self, name) is not None and not editing:
                raise FieldError(name, EDIT_ONLY)
        if self.only_masked and not masking:
            raise FieldError("only_masked", MASK_ONLY)
        if self.only_masked_padding is not None and not self.only_masked:
            raise FieldError("only_masked_padding", ONLY_MASKED_ONLY)
        for name in HIRES_FIELDS:
            if getattr(self, name) is not None and not self.hires:
                raise FieldError(name, HIRES_ONLY)
        if self.hires and editing:
            raise FieldError("hires", TXT2IMG_ONLY)

    def hires_asked(self) -> HiresAsked | None:
        """The hires fix asked for; None without hires=true."""
        if not self.hires:
            return None
        return HiresAsked(
            scale=self.hires_scale, resize=(self.hires_width or 0, self.hires_height or 0),
            upscaler=self.hires_upscaler, steps=self.hires_steps,
            denoising_strength=self.hires_strength, prompt=self.hires_prompt,
            negative_prompt=self.hires_negative_prompt,
        )  # fmt: skip

    def to_request(self) -> GenerationRequest:
        return GenerationRequest(
            prompt=self.prompt,
            negative_prompt=self.negative_prompt,
            steps=self.steps,
            guidance=self.guidance,
            scheduler=self.scheduler,
            size=parse_size(self.size) if self.size else None,
            seed=self.seed,
            force_cpu=self.force_cpu,
            model=self.model,
        )


IMAGE_SIZE = r"^[1-9][0-9]{0,4}x[1-9][0-9]{0,4}$"  # an input image's, as a client read it
NO_INPUT = "0" * 64  # the input of an edit estimated: a valid sha256 that names no image read
ESTIMATE_EDIT_ONLY = "applies to an edit only: send `image_size` too"
ESTIMATE_TXT2IMG_ONLY = "applies to text-to-image only: send no `image_size`"


def image_size(value: str) -> str:
    if not re.fullmatch(IMAGE_SIZE, value):
        raise ValueError("must be WIDTHxHEIGHT of the input image, e.g. 256x192")
    return value


def _image_size_schema(schema: dict[str, Any]) -> None:
    plain_optional(schema)
    schema["pattern"] = IMAGE_SIZE


class EstimateForm(GenerateForm):
    """POST /generate/estimate's body: POST /generate's fields with its rules (a value out of
    bounds is a 400 naming it), resolved as /generate resolves them (the model, its LoRAs and
    their recipe, the hires fix), and the images of a request; an edit by the size of its
    input."""

    prompt: Annotated[str, Field(max_length=PROMPT_MAX)] = Field(
        default="", description="as POST /generate; only its <lora:...> tags change the work"
    )
    n: Annotated[Annotated[int, Field(ge=1), AtMost("GEN_MAX_N"), Integer] | None, *Optional] = (
        Field(default=None, description="images of one request (OpenAI's n); default 1")
    )
    image_size: Annotated[
        str | None, BeforeValidator(_blank_is_absent), AfterValidator(lambda v: v and image_size(v))
    ] = Field(
        default=None,
        json_schema_extra=_image_size_schema,
        description="an edit: WIDTHxHEIGHT of its input image, which it works at when no "
        "`size` is given (each side rounded down to a multiple of 8, within the bounds)",
    )  # fmt: skip
    strength: Annotated[
        Annotated[float, Field(gt=0, le=1, allow_inf_nan=False), Number] | None, *Optional
    ] = Field(
        default=None,
        description=f"an edit's, with `image_size`: max(1, int(steps x strength)) steps run; "
        f"default {STRENGTH_DEFAULT}",
    )

    def to_request(self) -> GenerationRequest:
        """The request it estimates, before its model, LoRAs and hires fix are resolved
        (imagegen.api.native.resolved_request); an edit's with no input image (an estimate
        reads none)."""
        if self.strength is not None and self.image_size is None:
            raise FieldError("strength", ESTIMATE_EDIT_ONLY)
        if self.hires and self.image_size is not None:
            raise FieldError("hires", ESTIMATE_TXT2IMG_ONLY)
        self.check_edit_fields(editing=self.image_size is not None)
        request = super().to_request()
        if self.image_size is None:
            return request
        # What an edit runs: imagegen.services.edit_request.
        low, high = settings.GEN_MIN_SIDE, settings.GEN_MAX_SIDE
        size = request.size or working_size(parse_size(self.image_size), low=low, high=high)
        edit = EditRequest(source=NO_INPUT, strength=edit_settings(strength=self.strength).strength)
        return request.model_copy(update={"size": size, "edit": edit})


# Free text a query line (8190 bytes at most, config/gunicorn.py) has no room for at its
# bounds: GET /generate/estimate reads them when they fit, POST's body is where they belong.
FREE_TEXT = ("prompt", "negative_prompt", "lora", "webhook_url", "hires_prompt",
             "hires_negative_prompt")  # fmt: skip


def _without_free_text(schema: dict[str, Any]) -> None:
    for name in FREE_TEXT:
        schema["properties"][name]["include_in_schema"] = False  # Ninja leaves it out


class EstimateQuery(EstimateForm):
    """GET /generate/estimate: the same fields in the query, its document listing those a query
    line always has room for (FREE_TEXT is POST's)."""

    model_config = ConfigDict(json_schema_extra=_without_free_text)


def _tenths(seconds: float) -> float:
    """Rounded up, as the message's whole seconds are: the two never disagree."""
    return math.ceil(seconds * 10) / 10


class EstimateOut(Schema):
    """How long a request would take if sent now, from the steps and decodes measured here
    (docs/image-api.md, "Estimates")."""

    seconds: float | None = Field(
        description="until its last image is done, the jobs ahead included; null: nothing "
        "measured yet"
    )
    queue_seconds: float | None = Field(description="of which, the jobs ahead")
    image_seconds: float | None = Field(description="one of its images")
    steps: int | None = Field(description="the steps it would run (defaults and caps applied)")
    size: str | None = Field(description="WIDTHxHEIGHT it would run at")
    measured_size: str | None = Field(description="the measured size the figures scale from")
    counted: bool = Field(
        default=False,
        description="the figures are the model's work counted over this machine's pace, "
        "both at the model's load: no image measured here yet",
    )
    limit_seconds: float | None = Field(
        description="the longest estimate a synchronous request is taken with "
        "(GEN_SYNC_REFUSE_FACTOR x GEN_SYNC_TIMEOUT); null: none is refused"
    )
    refused: bool = Field(description="a synchronous request of it would be refused now (400)")
    message: str = Field(description="in words; when refused, the 400's own message")
    about: str | None = Field(
        default=None,
        description="the estimate alone in words, whatever the limit (for a client that sends "
        "it asynchronously, as the page does); null: no estimate",
    )

    @classmethod
    def of(cls, verdict: SyncEstimate) -> "EstimateOut":
        found = verdict.estimate
        return cls(
            seconds=None if found is None else _tenths(found.seconds),
            queue_seconds=None if found is None else _tenths(found.queue_seconds),
            image_seconds=None if found is None else _tenths(found.image_seconds),
            steps=None if found is None else found.steps,
            size=None if found is None else "{}x{}".format(*found.size),
            measured_size=None if found is None else "{}x{}".format(*found.basis),
            counted=found is not None and found.counted,
            limit_seconds=verdict.limit_seconds,
            refused=verdict.refused,
            message=verdict.message,
            about=verdict.about,
        )


class RouteEntry(Schema):
    method: str
    path: str
    description: str


class GenerationRulesOut(Schema):
    """The defaults and caps a generation request meets here (imagegen.generation.presets),
    so a client sees which model preset applies without sending a request."""

    preset: str | None = Field(
        description="the model preset in force, recognised from MODEL_ID and MODEL_ADAPTERS "
        "(the defaults: sdxl-lightning-4step); null: none (GEN_FOLLOW_MODEL=0, or a model "
        "without one)"
    )
    steps: int = Field(description="the steps of a request that sends none")
    guidance: float = Field(description="the guidance of a request that sends none")
    scheduler: str | None = Field(
        description="the scheduler of a request that names none; null: the model's own"
    )
    max_steps: int | None = Field(description="sent steps above it are lowered to it; null: none")
    max_guidance: float | None = Field(
        description="sent guidance above it is lowered to it; null: none"
    )
    schedulers: list[str] | None = Field(
        description="the schedulers a request may name; another is replaced by `scheduler`. "
        "null: any"
    )


class GenerationInForce(GenerationRulesOut):
    """GET /api's `generation`: the rules and the adapters the preset is recognised from."""

    adapters: list[AdapterView] = Field(
        description="LoRA adapters (MODEL_ADAPTERS) fused into the weights at load, in order"
    )


class ApiIndex(Schema):
    """GET /api: where the documentation is, every route of the image service, and the
    generation rules in force (which model preset applies, without sending a request)."""

    service: str
    version: str
    docs: str
    openapi: str
    routes: list[RouteEntry]
    generation: GenerationInForce
    open: bool = Field(description="true while neither API_TOKEN nor API_KEYS is set")
    warning: str | None = Field(None, description="what an open service lets anyone do")


class OfferedPresetOut(Schema):
    """What a request naming this model gets when it leaves a field out."""

    name: str | None = Field(description="the preset recognised from its id; null: none")
    steps: int
    guidance: float
    scheduler: str | None = Field(description="null: the model's own")
    max_steps: int | None = Field(description="sent steps above it are lowered to it; null: none")
    max_guidance: float | None = Field(
        description="sent guidance above it is lowered to it; null: none"
    )
    native_size: list[int] | None = Field(
        description="[width, height] of a request that sends no size; null until on the share"
    )


class OfferedModelOut(Schema):
    """One offered model (MODEL_ID, then each MODELS entry) as this process sees it."""

    id: str = Field(description="the hub repo id, which requests name it by")
    revision: str
    default: bool = Field(description="MODEL_ID: what a request naming no model runs")
    state: str = Field(
        description="as the top-level `state`: not_started, downloading, loading, ready or "
        "failed; not_started again once freed for another model"
    )
    weights_on_share: bool
    resident: bool = Field(description="loaded in memory now (in distributed mode: by a worker)")
    preset: OfferedPresetOut


class ModelStatusOut(ModelStatus):
    """GET /model/status and POST /model/pull: the model's status and, beside its adapters,
    the generation rules they put in force."""

    generation: GenerationRulesOut = Field(
        description="the rules in force, as GET /api's `generation` (the adapters are above)"
    )
    models: list[OfferedModelOut] | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="every offered model, MODEL_ID's first (then MODELS'); the fields above "
        "describe MODEL_ID's. GET /model/status and POST /model/pull always answer it",
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


def errors(*statuses: int, body: type[Schema] = ImageErrorBody) -> dict[int, type[Schema]]:
    """The error answers a route declares, in its protocol's error shape; every
    token-protected route answers 401 when API_TOKEN is set, so it declares it whether or not
    the token is set now."""
    return dict.fromkeys((401, *statuses), body)


OWNER = (
    "the name of the API key that made it; answered only to an admin key (or API_TOKEN) "
    "while named keys are on (API_KEYS), absent otherwise"
)


def owner_for(key: str | None, context: dict | None) -> str | None:
    """The `owner` a response names: `key` to whoever may see every key's (sees_owners)."""
    request = (context or {}).get("request")
    return key if request is not None and sees_owners(request) else None


def without_absent_owner(data: Any) -> Any:
    """Answers to everyone but an admin carry no `owner` at all."""
    if isinstance(data, dict) and data.get("owner") is None:
        data.pop("owner", None)
    return data


class ImageOut(ImageRecord, Schema):
    """A stored image's record as answered: with its owner's name for an admin."""

    owner: str | None = Field(None, description=OWNER)
    url: str = Field("", description="its PNG (GET /images/<id>.png), as a job's image_url")

    @staticmethod
    def resolve_owner(record: ImageRecord, context: dict | None) -> str | None:
        return owner_for(record.key, context)

    @staticmethod
    def resolve_url(record: ImageRecord) -> str:
        return image_url(record.id)

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler):
        # No return annotation: pydantic then documents the model's own fields. As the
        # record's own serializer, no `key` on an open service.
        data = without_absent_owner(handler(self))
        if isinstance(data, dict) and data.get("key") is None:
            data.pop("key", None)
        return data


class ImagePage(Schema):
    items: list[ImageOut]
    next: str | None = Field(description="the next page, newest first; null on the last")


class WebhookTry(Schema):
    at: str
    status: int | None = Field(description="the receiver's HTTP status; null: no answer")
    error: str | None = Field(description="why there was no answer (refused, timed out, ...)")


class WebhookOut(Schema):
    url: str
    event: str | None = Field(description="job.succeeded, job.failed or job.cancelled; null "
                              "until the job ends")  # fmt: skip
    state: str = Field(description="waiting (for the job), pending, delivered or given up")
    tries: list[WebhookTry]


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
    preview_step: int = Field(description="the step of the latest preview; 0: none yet")
    preview_url: str | None = Field(description="the latest preview (a small JPEG); null: none")
    request_id: str | None = Field(
        description="the X-Request-ID of the request that queued it (its own, or the one "
        "the service gave it), as the logs of the web process and the worker carry it"
    )
    owner: str | None = Field(None, description=OWNER)
    webhook: WebhookOut | None = Field(
        None, description="the job's webhook and each try to deliver it; absent: none"
    )

    @staticmethod
    def resolve_owner(job: JobView, context: dict | None) -> str | None:
        return owner_for(job.key, context)

    @staticmethod
    def resolve_webhook(job: JobView) -> dict | None:
        return selectors.webhook_record(current_backend(), job_id=job.id)

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler):
        data = without_absent_owner(handler(self))
        if isinstance(data, dict) and data.get("webhook") is None:
            data.pop("webhook", None)
        return data

    @staticmethod
    def resolve_preview_url(job: JobView) -> str | None:
        return f"/jobs/{job.id}/preview" if job.preview_step else None

    @staticmethod
    def resolve_parameters(job: JobView) -> GenerationRequest:
        return job.parameters.answered()

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


class JobPage(Schema):
    """GET /jobs?paged=true: the jobs in GET /images' paging shape."""

    items: list[JobOut]
    next: str | None = Field(description="the next page, in the same order; null on the last")
