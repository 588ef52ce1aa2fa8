"""Schema fuzzing: schemathesis generates requests from the service's own OpenAPI document and
sends them to the app under gunicorn (tiny pipeline, small generation bounds, a real
wire-protocol database). Any 5xx, any status the document does not declare, and any
schema-valid request the service refuses fails the test, except the reviewed entries of
ALLOWED_REFUSALS, each of which says why refusing is right. A refusal is let pass by its
message only when its rule, run again here on what the request sent, confirms it: a rule
broken to refuse everything with an allowed message still fails the test.

Each operation gets a bounded number of examples, positive (schema-valid) and negative
(schema-invalid), sized to its inputs: an operation of one parameter and no body gets a few
(its space is one string's), the others more; they are derandomised, so a run is repeatable
and CI does not pass or fail by chance.
"""

import base64
import io
import re
import time
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import nullcontext, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import requests
import schemathesis
from bson import ObjectId
from django.conf import settings as django_settings
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from PIL import Image, PngImagePlugin
from pydantic import ValidationError as PydanticError
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import Failure, FailureGroup
from schemathesis.specs.openapi.checks import positive_data_acceptance, status_code_conformance
from schemathesis.transport.serialization import Binary

from core.errors import FieldError
from core.text import NOT_BLANK
from core.text import is_blank as text_is_blank
from imagegen.api.a1111 import SAMPLER_RULE, Txt2ImgIn, batch_limit
from imagegen.api.openai import MASK_NEEDS_ALPHA, ONE_PER_STREAM, repaint_mask
from imagegen.api.protocol import NOT_BASE64
from imagegen.api.schemas import (
    ESTIMATE_EDIT_ONLY,
    ESTIMATE_TXT2IMG_ONLY,
    HIRES_ONLY,
    NUMBER_TOO_LONG,
    parse_size,
)
from imagegen.api.schemas import HIRES_FIELDS as SCHEMA_HIRES_FIELDS
from imagegen.generation.edit_inputs import MARKS_NOTHING, NOT_AN_IMAGE
from imagegen.generation.hires import (
    SCALE_RULE,
    STRENGTH_RULE,
    TXT2IMG_ONLY,
    target_rule,
    target_size,
)
from imagegen.generation.requests import EDIT_ONLY, MASK_NEEDS_IMAGE, MASK_ONLY, ONLY_MASKED_ONLY
from imagegen.generation.schedulers import (
    A1111_SCHEDULES,
    SCHEDULERS,
    UnknownScheduler,
    a1111_scheduler,
)
from imagegen.services import A1111_FIELDS, NATIVE_FIELDS, NO_SECRET, SYNC_WEBHOOK, upscale_intake
from scripts.embedded_mongo import EmbeddedMongo
from tests.support.health_watch import health_beside
from tests.support.model_service import SD_REPO, ready_app
from tests.support.processes import AppServer
from todos.cursors import NOT_A_CURSOR, Cursor
from todos.errors import IdRequired, TodoNotFound
from todos.selectors import object_id

EXAMPLES = 20  # per operation and generation mode, for an operation of a body or parameters
FEW_EXAMPLES = 5  # for an operation of one parameter and no body (an id, a flag)
CHECKS = [not_a_server_error, status_code_conformance, positive_data_acceptance]

MISSING = object()
ID_REQUIRED = IdRequired.message


def sent(case: Case, field: str) -> Any:
    """What the case sent for a field as a refusal names it: `todos.3.title` walks the body,
    `after` is a query parameter, `todo_id` a path parameter. MISSING when it sent none."""
    for source in (case.body, case.query, getattr(case, "path_parameters", None)):
        value = source
        try:
            for part in field.split("."):
                value = value[int(part)] if isinstance(value, list) else value[part]
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        return value
    return MISSING


def sibling(field: str, name: str) -> str:
    """The field `name` beside `field` (`todos.3.title`, "description": `todos.3.description`)."""
    return ".".join([*field.split(".")[:-1], name])


# The rules the allowed messages name, restated here from their documents rather than
# imported, so that the code under test is not its own judge. Each answers: does the rule
# refuse what this case sent for this field?

_INVISIBLE = {"Cc", "Cf", "Mn", "Me", "Zs", "Zl", "Zp"}


def is_blank(case: Case, field: str) -> bool:
    """NOT_BLANK (config/text.py): nothing in the text would show, only spaces (every Unicode
    one), control and format characters, and combining marks with no base to sit on."""
    text = sent(case, field)
    return isinstance(text, str) and all(
        char.isspace() or unicodedata.category(char) in _INVISIBLE for char in text
    )


def is_not_a_cursor(case: Case, field: str) -> bool:
    """NOT_A_CURSOR (todos/cursors.py): a cursor is the one URL-safe base64 spelling, without
    padding, of 20 bytes (createdAt in ms since the epoch, signed, then an ObjectId's 12
    bytes), whose createdAt a datetime can hold."""
    text = sent(case, field)
    if not isinstance(text, str) or not re.fullmatch(r"[A-Za-z0-9_-]{27}", text):
        return True
    raw = base64.urlsafe_b64decode(text + "=")
    if base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=") != text:
        return True
    try:
        datetime(1970, 1, 1, tzinfo=UTC) + timedelta(
            milliseconds=int.from_bytes(raw[:8], "big", signed=True)
        )
    except OverflowError:
        return True
    return False


def exceeds_batch_limit(case: Case, field: str) -> bool:
    """batch_limit (imagegen/api/a1111.py): batch_size x n_iter images at most GEN_MAX_N, an
    omitted or null one counting 1."""
    counts = [sent(case, sibling(field, name)) for name in ("batch_size", "n_iter")]
    batch_size, n_iter = (1 if c in (MISSING, None) else c for c in counts)
    return batch_size * n_iter > django_settings.GEN_MAX_N


# The (sampler, schedule type) pairs offered: the schedulers' table that the A1111 mapping
# reads (imagegen/generation/schedulers.py). No schedule type sent is "Automatic".
_OFFERED_PAIRS = {pair for scheduler in SCHEDULERS.values() for pair in scheduler.a1111}
_SCHEDULE_LABELS = {
    **{label: label for label in A1111_SCHEDULES},
    **{label.lower().replace(" ", "_"): label for label in A1111_SCHEDULES},
}


# A model the deployment does not offer: the message names what was sent (one key for all).
NOT_OFFERED = "is not offered (MODELS)"


def is_unoffered_model(case: Case, field: str) -> bool:
    """The fuzzed app offers its MODEL_ID alone (the tests' tiny SD: no MODELS): any other
    `model` than its repo id or name part, in any case, is refused."""
    value = sent(case, field)
    if value in (MISSING, None, ""):
        return False
    return str(value).lower() not in {SD_REPO.lower(), SD_REPO.split("/")[1].lower()}


# A LoRA field's refusals: each message names what was sent (one key for each rule).
LORA_NOT_OFFERED = "no LoRA is offered by that name"
LORA_WEIGHT = "the weight must be in [-4, 4]"
LORA_NAMELESS = "names no LoRA"


def _sent_loras(case: Case, field: str) -> list[tuple[str, str | None]]:
    """(name, weight text) of each `lora` form field or JSON `loras` item sent."""
    value = sent(case, field)
    values = value if isinstance(value, list) else [] if value in (MISSING, None) else [value]
    if field == "loras":
        return [(str(v.get("name", "")), None) for v in values if isinstance(v, dict)]
    found = []
    for text in (str(v) for v in values if str(v).strip()):
        name, colon, weight = text.strip().partition(":")
        found.append((name.strip(), weight if colon else None))
    return found


def names_an_unoffered_lora(case: Case, field: str) -> bool:
    """The fuzzed app offers no LoRA (no LORAS, no dropped file): any LoRA named is refused."""
    return any(name for name, _ in _sent_loras(case, field))


def weighs_outside_the_range(case: Case, field: str) -> bool:
    """A `lora` field's weight after the colon is a number in [-4, 4] (float's syntax)."""

    def bad(text: str | None) -> bool:
        try:
            return text is not None and not abs(float(text.strip())) <= 4
        except ValueError:
            return True

    return any(bad(weight) for _, weight in _sent_loras(case, field))


def names_no_lora(case: Case, field: str) -> bool:
    return any(not name for name, _ in _sent_loras(case, field))


def is_unoffered_sampler(case: Case, field: str) -> bool:
    """SAMPLER_RULE (imagegen/api/a1111.py): a sampler (sampler_name, else its older name
    sampler_index) is refused unless it is offered with the schedule type sent."""
    values = [sent(case, sibling(field, n)) for n in ("sampler_name", "sampler_index")]
    sampler = next((v for v in values if v not in (MISSING, None, "")), None)
    if sampler is None:
        return False  # no sampler: the service's default scheduler, nothing to refuse
    schedule = sent(case, sibling(field, "scheduler"))
    schedule = "Automatic" if schedule in (MISSING, None, "") else schedule
    return (sampler, _SCHEDULE_LABELS.get(schedule, schedule)) not in _OFFERED_PAIRS


def file_bytes(value: Any) -> Any:
    """A file part's bytes as sent: schemathesis hands a generated file over as `Binary`, an
    empty str with its bytes in `.data` (read as text it is no image at all), a text as str."""
    if isinstance(data := getattr(value, "data", None), bytes):
        return data
    return value.encode("latin-1", "replace") if isinstance(value, str) else value


def is_no_image(case: Case, field: str) -> bool:
    """What an `image` file part of POST /generate must be (docs/image-api.md, "Starting
    from an image"), and what an A1111 image field's base64 must decode to
    (docs/protocols.md): a whole PNG, JPEG or WebP image. Pillow run here on the bytes sent."""
    data = sent(case, field)
    if _is_json(case):
        data = _base64_decoded(data)
        if data is None:
            return False  # not base64: refused as NOT_BASE64, not as this
    else:
        data = file_bytes(data)
    try:
        with Image.open(io.BytesIO(data), formats=("PNG", "JPEG", "WEBP")) as image:
            image.load()
    except Exception:
        return True
    return False


def has_no_alpha(case: Case, field: str) -> bool:
    """OpenAI's mask (docs/protocols.md, "Editing an image"): an image whose transparent
    pixels mark what to repaint, so one without an alpha channel (nor a transparent colour)
    marks nothing. Pillow run here on the bytes sent."""
    try:
        with Image.open(io.BytesIO(file_bytes(sent(case, field)))) as image:
            return "A" not in image.getbands() and "transparency" not in image.info
    except Exception:
        return False


def _is_json(case: Case) -> bool:
    return getattr(case, "media_type", None) == "application/json"


def _base64_decoded(value: Any) -> bytes | None:
    """An A1111 image field's bytes (the first of a list; a `data:` prefix dropped), None
    when it is not base64, as RFC 4648 spells it with whitespace ignored."""
    if isinstance(value, list):
        value = value[0] if value else None
    if not isinstance(value, str):
        return None
    if value.startswith("data:"):
        value = value.partition(",")[2]
    text = "".join(value.split())
    if len(text) % 4 or not re.fullmatch(r"[A-Za-z0-9+/]*={0,2}", text):
        return None
    return base64.b64decode(text)


def is_not_base64(case: Case, field: str) -> bool:
    """NOT_BASE64 (imagegen/api/protocol.py): an A1111 image field that is not base64."""
    return _base64_decoded(sent(case, field)) is None


def sent_no_mask(case: Case, field: str) -> bool:
    """only_masked needs a `mask` file part."""
    return sent(case, "mask") in (MISSING, None)


def sent_not_only_masked(case: Case, field: str) -> bool:
    """only_masked_padding applies with only_masked=true only."""
    return str(sent(case, "only_masked")).lower() not in ("true", "1", "on", "yes")


def sent_no_image(case: Case, field: str) -> bool:
    """`strength`, `mask_blur` and `mask` belong to an edit: refused without an `image`."""
    return sent(case, "image") in (MISSING, None)


def streams_more_than_one(case: Case, field: str) -> bool:
    """OpenAI's stream: true sends one image's events: n must be 1 (or absent) with it."""
    stream = str(sent(case, "stream")).lower() in ("true", "1", "on", "yes")
    n = sent(case, "n")
    return stream and n not in (MISSING, None) and str(n) != "1"


def marks_nothing(case: Case, field: str) -> bool:
    """A mask with no pixel but black repaints nothing (docs/image-api.md, "Starting from an
    image"): its first frame, read as one channel here, has no bright pixel."""
    try:
        with Image.open(io.BytesIO(file_bytes(sent(case, field)))) as image:
            image.seek(0)
            return image.convert("L").getextrema()[1] == 0
    except Exception:
        return False


def _sent_async(case: Case) -> bool:
    return any(
        str(value).strip().lower() in ("true", "1", "on", "yes")
        for value in (case.body.get("async") if isinstance(case.body, dict) else None,
                      (case.query or {}).get("async"))
    )  # fmt: skip


def webhook_without_async(case: Case, field: str) -> bool:
    """A webhook tells an asynchronous job's end; a synchronous request has its answer."""
    return not _sent_async(case)


def webhook_without_secret(case: Case, field: str) -> bool:
    """The fuzzed app has no WEBHOOK_SECRET: an asynchronous job naming a webhook is refused."""
    return _sent_async(case) and not django_settings.WEBHOOK_SECRET


# Upscales (POST /upscale, A1111's extras): the source, the scale or size, and the upscaler,
# restated from docs/image-api.md ("Upscaling an image") and docs/protocols.md.
FUZZ_MAX_SIDE = 64  # the fuzzed app's GEN_MAX_SIDE
# Its upscalers: no UPSCALERS, so Pillow's two filters, and A1111's "None" (Lanczos).
OFFERED_UPSCALERS = {"lanczos", "nearest", "none"}
NOT_OFFERED_UPSCALER = "is not offered (UPSCALERS)"
PAST_MAX_SIDE = "makes a result past GEN_MAX_SIDE on a side"
_A1111_SIZE = {"upscaling_resize": "scale", "upscaling_resize_w": "width",
               "upscaling_resize_h": "height"}  # fmt: skip


def _absent(value: Any) -> bool:
    return value in (MISSING, None, "")


def _upscale_source(case: Case) -> tuple[int, int] | None:
    """The size of the image an upscale sent (a file part; A1111's base64 `image` or first
    item), None when none decodes."""
    data = sent(case, "image")
    if data is MISSING:
        data = sent(case, "imageList.0.data")
    data = _base64_decoded(data) if _is_json(case) else file_bytes(data)
    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.size
    except Exception:
        return None


def _asked(case: Case) -> dict[str, Any]:
    """An upscale's scale, width and height as sent (A1111's by resize_mode), None if absent."""
    if sent(case, "upscaling_resize") is not MISSING or _is_json(case):
        sized = sent(case, "resize_mode") == 1
        values = {"scale": None if sized else sent(case, "upscaling_resize")}
        for name in ("width", "height"):
            field = f"upscaling_resize_{name[0]}"
            values[name] = sent(case, field) if sized else None
        return {k: (512 if k != "scale" else 2.0) if v is MISSING else v
                for k, v in values.items()}  # fmt: skip
    return {k: None if _absent(v := sent(case, k)) else float(v)
            for k in ("scale", "width", "height")}  # fmt: skip


def sent_no_source(case: Case, field: str) -> bool:
    """A file part counts once sent, empty or not (schemathesis's Binary equals "")."""
    return sent(case, "image") in (MISSING, None) and _absent(sent(case, "image_id"))


def sent_both_sources(case: Case, field: str) -> bool:
    return sent(case, "image") not in (MISSING, None) and not _absent(sent(case, "image_id"))


def sent_no_scale(case: Case, field: str) -> bool:
    return all(value is None for value in _asked(case).values())


def sent_scale_and_size(case: Case, field: str) -> bool:
    asked = _asked(case)
    return asked["scale"] is not None and (
        asked["width"] is not None or asked["height"] is not None
    )


def _scale_of(case: Case) -> float | None:
    """The scale an upscale runs at: sent, or the one a width and/or height cover."""
    size, asked = _upscale_source(case), _asked(case)
    if size is None:
        return None
    if asked["scale"] is not None:
        return float(asked["scale"])
    ratios = [asked[k] / side for k, side in (("width", size[0]), ("height", size[1]))
              if asked[k] is not None]  # fmt: skip
    return max(ratios) if ratios else None


def does_not_enlarge(case: Case, field: str) -> bool:
    scale = _scale_of(case)
    return scale is not None and scale <= 1


def is_past_max_side(case: Case, field: str) -> bool:
    size, scale = _upscale_source(case), _scale_of(case)
    if size is None or scale is None:
        return False
    return max(round(size[0] * scale), round(size[1] * scale)) > FUZZ_MAX_SIDE


def is_unoffered_upscaler(case: Case, field: str) -> bool:
    value = sent(case, field)
    return isinstance(value, str) and value.strip().lower() not in OFFERED_UPSCALERS | {""}


# The tiny SD model's own size (its UNet's 32 latents, its VAE's 2x): a first pass sent no size.
TINY_NATIVE = (64, 64)
HIRES_FIELDS = {"hr_scale": A1111_FIELDS, "hr_resize_x": A1111_FIELDS,
                "hr_resize_y": A1111_FIELDS, "hires_scale": NATIVE_FIELDS,
                "hires_width": NATIVE_FIELDS, "hires_height": NATIVE_FIELDS}  # fmt: skip


def _on(value: Any) -> bool:
    return str(value).strip().lower() in ("true", "1", "on", "yes")


def hires_target_refused(case: Case, field: str) -> bool:
    """The hires fix's target rule (imagegen/generation/hires.py, target_size) run again on
    what was sent, naming `field`: a scale or size that makes a result no larger than the
    first pass or past GEN_MAX_SIDE (the fuzzed app's FUZZ_MAX_SIDE: every one). A1111's needs
    enable_hr, the native form's hires."""
    native = field.startswith("hires_")
    names = HIRES_FIELDS[field]
    if not _on(sent(case, "hires" if native else "enable_hr")):
        return False

    def number(name: str) -> Any:
        value = sent(case, names[name])
        return None if value in (MISSING, None, "") else float(value)

    if native:
        size = sent(case, "size")
        first = TINY_NATIVE if size in (MISSING, None, "") else parse_size(str(size))
    else:
        width, height = (sent(case, side) for side in ("width", "height"))
        width = height if width in (MISSING, None) else width
        height = width if height in (MISSING, None) else height
        first = TINY_NATIVE if width in (MISSING, None) else (int(width), int(height))
    resize = tuple(int(number(side) or 0) for side in ("resize_x", "resize_y"))
    try:
        target_size(first, scale=number("scale"), resize=resize,  # type: ignore[arg-type]
                    fields=names, max_side=FUZZ_MAX_SIDE)  # fmt: skip
    except FieldError as refused:
        return refused.field == field
    return False


def hires_scale_refused(case: Case, field: str) -> bool:
    """hr_scale with enable_hr and no hr_resize_x/y: above 1 (imagegen/generation/hires.py)."""
    resized = any(
        sent(case, side) not in (MISSING, None, 0) for side in ("hr_resize_x", "hr_resize_y")
    )
    scale = sent(case, field)
    return (
        _on(sent(case, "enable_hr"))
        and not resized
        and scale not in (MISSING, None)
        and not float(scale) > 1
    )


def hires_strength_refused(case: Case, field: str) -> bool:
    """txt2img's denoising_strength with enable_hr: 0 < s <= 1 (imagegen/generation/hires.py);
    without enable_hr it is ignored, so its schema cannot bound it."""
    value = sent(case, field)
    return (
        _on(sent(case, "enable_hr"))
        and value not in (MISSING, None)
        and not (0 < float(value) <= 1)
    )


def hires_field_without_hires(case: Case, field: str) -> bool:
    """A hires_* field tunes hires=true's fix: refused without it rather than ignored."""
    return not _on(sent(case, "hires")) and sent(case, field) not in (MISSING, None, "")


def is_blank_id(case: Case, field: str) -> bool:
    """A todo id of spaces only (str.strip's, control separators included) is a missing id:
    the contract answers `id is required`, though the path's schema is any text."""
    value = sent(case, field)
    return isinstance(value, str) and not value.strip()


def estimates_an_edit(case: Case, _field: str) -> bool:
    """An estimate is an edit's when it sends its input's size (blank is absent)."""
    size = sent(case, "image_size")
    return isinstance(size, str) and not text_is_blank(size)


@dataclass(frozen=True)
class Allowed:
    why: str  # why refusing a schema-valid request with this message is right
    holds: Callable[[Case, str], bool]  # its rule, run again on what the case sent


# Refusals of schema-valid requests that are right, by (field, message) of the 400's details.
ALLOWED_REFUSALS = {
    ("todo_id", ID_REQUIRED): Allowed("a blank id is a missing one (the contract)", is_blank_id),
    ("image", NOT_AN_IMAGE): Allowed(
        "an `image` file part is binary to the schema; that it is an image no schema can say",
        is_no_image,
    ),
    ("mask", NOT_AN_IMAGE): Allowed("as `image`", is_no_image),
    ("mask", MASK_NEEDS_ALPHA): Allowed(
        "OpenAI's mask marks what to repaint by its alpha channel; a file part is binary to "
        "the schema, which cannot say it has one",
        has_no_alpha,
    ),
    ("mask", MASK_NEEDS_IMAGE): Allowed(
        "a mask masks an image: OpenAPI's form bodies cannot state one part's need of another",
        sent_no_image,
    ),
    ("strength", EDIT_ONLY): Allowed(
        "strength applies to an image sent; refused without one rather than ignored, which a "
        "form's schema cannot state",
        sent_no_image,
    ),
    ("mask_blur", EDIT_ONLY): Allowed("as strength", sent_no_image),
    ("strength", ESTIMATE_EDIT_ONLY): Allowed(
        "GET /generate/estimate's strength estimates an edit, of an image_size: refused "
        "without one rather than ignored, which a query's schema cannot state",
        lambda case, _field: sent(case, "image_size") in (MISSING, None),
    ),
    ("resize_mode", EDIT_ONLY): Allowed("as strength", sent_no_image),
    ("only_masked", MASK_ONLY): Allowed(
        "only masked applies to a mask sent; a form's schema cannot state one part's need of "
        "another",
        sent_no_mask,
    ),
    ("only_masked_padding", ONLY_MASKED_ONLY): Allowed(
        "the padding applies with only_masked=true; a schema cannot state one field's need of "
        "another's value",
        sent_not_only_masked,
    ),
    ("n", ONE_PER_STREAM): Allowed(
        "a stream carries one image's events; JSON Schema cannot bound n by stream's value",
        streams_more_than_one,
    ),
    ("init_images", NOT_BASE64): Allowed(
        "A1111's image fields are strings holding base64 (a `data:` URL allowed); A1111's own "
        "schema declares them plain strings, and so does this document",
        is_not_base64,
    ),
    ("init_images", NOT_AN_IMAGE): Allowed("as `image`, once the base64 is decoded", is_no_image),
    ("mask", NOT_BASE64): Allowed("as init_images", is_not_base64),
    ("image", NOT_BASE64): Allowed("png-info's image, as init_images", is_not_base64),
    ("prompt", NOT_BLANK): Allowed(
        "the not-blank rule counts format characters and combining marks as invisible; JSON "
        "Schema's regular expressions have no Unicode-category classes to say so, so the "
        "document states the rule in words (the description)",
        is_blank,
    ),
    ("title", NOT_BLANK): Allowed(
        "a todo title's not-blank rule, the same rule as the prompt's", is_blank
    ),
    ("after", NOT_A_CURSOR): Allowed(
        "a page cursor is opaque: only one the service wrote into a Link header is valid, and "
        "no schema can enumerate those",
        is_not_a_cursor,
    ),
    ("n_iter", batch_limit(django_settings.GEN_MAX_N)): Allowed(
        "A1111's txt2img makes batch_size x n_iter images, at most GEN_MAX_N in all; JSON Schema "
        "bounds each field but cannot bound their product, so n_iter's description states it",
        exceeds_batch_limit,
    ),
    ("mask", MARKS_NOTHING): Allowed(
        "a mask that marks no pixel would answer the image as sent; a file part is binary to "
        "the schema, which cannot say what its pixels are",
        marks_nothing,
    ),
    ("webhook_url", SYNC_WEBHOOK): Allowed(
        "a webhook_url belongs to an asynchronous job (async=true); a form's schema cannot "
        "state one field's need of another's value",
        webhook_without_async,
    ),
    ("webhook_url", NO_SECRET): Allowed(
        "a webhook is signed; with no WEBHOOK_SECRET configured (this app's) there is nothing "
        "to sign it with, which no schema can know",
        webhook_without_secret,
    ),
    ("model", NOT_OFFERED): Allowed(
        "which models a deployment offers is its settings' (MODEL_ID, MODELS), not the "
        "document's: the description says so, and the 400 lists the offered ids",
        is_unoffered_model,
    ),
    **{
        (field, target_rule(FUZZ_MAX_SIDE)): Allowed(
            "a hires fix's result must be larger than its first pass and within GEN_MAX_SIDE: "
            "its size is the first pass's (width and height, or the model's own) times the "
            "scale, or the size asked, which JSON Schema cannot compute",
            hires_target_refused,
        )
        for field in HIRES_FIELDS
    },
    ("hr_scale", SCALE_RULE): Allowed(
        "A1111 clients send hr_scale whether or not enable_hr is on (webuiapi always, "
        "SillyTavern from a slider starting at 1), so only enable_hr's fix bounds it",
        hires_scale_refused,
    ),
    ("denoising_strength", STRENGTH_RULE): Allowed(
        "as hr_scale: A1111 clients send txt2img's denoising_strength with the fix off",
        hires_strength_refused,
    ),
    ("hires", ESTIMATE_TXT2IMG_ONLY): Allowed(
        "as TXT2IMG_ONLY: an estimate's edit is marked by its `image_size`",
        estimates_an_edit,
    ),
    ("hires", TXT2IMG_ONLY): Allowed(
        "the hires fix is text-to-image's: refused with an `image` rather than ignored, which "
        "a form's schema cannot state",
        lambda case, _field: not sent_no_image(case, "image"),
    ),
    **{
        (field, HIRES_ONLY): Allowed(
            "a hires_* field tunes hires=true's fix; a schema cannot state one field's need of "
            "another's value",
            hires_field_without_hires,
        )
        for field in SCHEMA_HIRES_FIELDS
    },
    ("lora", LORA_NOT_OFFERED): Allowed(
        "which LoRAs a deployment offers is its settings' (LORAS) and its share's, not the "
        "document's: the 400 lists the offered ones",
        names_an_unoffered_lora,
    ),
    ("loras", LORA_NOT_OFFERED): Allowed("as lora", names_an_unoffered_lora),
    ("lora", LORA_WEIGHT): Allowed(
        "a `lora` field is `name:weight` in one string, as A1111's tag writes it; a pattern "
        "cannot bound the number after the colon to [-4, 4] (the description states it)",
        weighs_outside_the_range,
    ),
    ("lora", LORA_NAMELESS): Allowed(
        "as the weight: `:1` names nothing, which the description states", names_no_lora
    ),
    ("sampler_name", SAMPLER_RULE): Allowed(
        "A1111's sampler and schedule type are each one of a listed set (their enums), but not "
        "every sampler has every schedule type; JSON Schema states no such pairs on a field",
        is_unoffered_sampler,
    ),
    ("imageList.N.data", NOT_BASE64): Allowed(
        "A1111's extras' images, as init_images", is_not_base64
    ),
    ("imageList.N.data", NOT_AN_IMAGE): Allowed(
        "as `image`, once the base64 is decoded", is_no_image
    ),
    ("image", upscale_intake.NO_SOURCE): Allowed(
        "an upscale needs an image file part or a stored image's id, one of two optional "
        "fields: a form's schema cannot state that one of them is required",
        sent_no_source,
    ),
    ("image_id", upscale_intake.BOTH_SOURCES): Allowed(
        "one source at a time: a form's schema cannot state that two fields exclude each other",
        sent_both_sources,
    ),
    ("scale", upscale_intake.NO_SCALE): Allowed(
        "an upscale needs a scale or a target size, optional fields one of which is required: "
        "a form's schema cannot state it",
        sent_no_scale,
    ),
    ("scale", upscale_intake.SCALE_AND_SIZE): Allowed(
        "a scale and a target size exclude each other, which a form's schema cannot state",
        sent_scale_and_size,
    ),
    **{
        (name, upscale_intake.NOT_LARGER): Allowed(
            "a target size must enlarge the image sent, whose size no schema can know",
            does_not_enlarge,
        )
        for name in ("width", "height", "upscaling_resize_w", "upscaling_resize_h")
    },
    **{
        (name, PAST_MAX_SIDE): Allowed(
            "the result's sides are the image's times the scale; the image's size is its "
            "pixels', which the schema cannot know",
            is_past_max_side,
        )
        for name in ("scale", "width", "height", *_A1111_SIZE)
    },
    **{
        (name, NOT_OFFERED_UPSCALER): Allowed(
            "which upscalers a deployment offers is its settings' (UPSCALERS), not the "
            "document's: the 400 lists the offered names",
            is_unoffered_upscaler,
        )
        for name in ("upscaler", "upscaler_1", "upscaler_2")
    },
}


def allowed_refusal(response) -> list[dict[str, str]] | None:
    """The details of a 400 whose every refused field is an entry of ALLOWED_REFUSALS (a todo
    title is named by its place, `todo.title` or `todos.3.title`); None for any other answer."""
    if response.status_code != 400:
        return None
    error = response.json()["error"]
    details = error.get("details") or [{}]
    if error["message"] == ID_REQUIRED:  # the contract's shape: a message, no details
        details = [{"field": "todo_id", "message": ID_REQUIRED}]
    if not all(entry(detail) in ALLOWED_REFUSALS for detail in details):
        return None
    return details


def entry(detail: dict[str, str]) -> tuple[str, str | None]:
    """A refused field's key in ALLOWED_REFUSALS: its name without a todo's place."""
    field = re.sub(r"^todos?\.(\d+\.)?", "", detail.get("field", ""))
    field = re.sub(r"^imageList\.\d+\.", "imageList.N.", field)
    message = detail.get("message")
    if (
        field in ("upscaler", "upscaler_1", "upscaler_2")
        and message
        and re.fullmatch(r"(['\"]).*\1 is not offered; offered: .*", message, re.S)
    ):
        message = NOT_OFFERED_UPSCALER
    if message and re.fullmatch(
        r"makes \d+x\d+ of the \d+x\d+ source, past GEN_MAX_SIDE \(\d+\) on a side", message
    ):
        message = PAST_MAX_SIDE
    if (
        field == "model"
        and message
        and re.fullmatch(r"(['\"]).*\1 is not offered; offered: .*", message, re.S)
    ):
        message = NOT_OFFERED
    if field in ("lora", "loras") and message:
        for rule, pattern in (
            (LORA_NOT_OFFERED, r".*: no LoRA .* is offered; offered: .*"),
            (LORA_WEIGHT, r".*: the weight must be in \[-4, 4\] \(.*\)"),
            (LORA_NAMELESS, r".* names no LoRA \(.*\)"),
        ):
            if re.fullmatch(pattern, message, re.S):
                message = rule
    return field, message


def unconfirmed(case: Case, details: list[dict[str, str]]) -> list[str]:
    """The allowed refusals whose rule, run on what the case sent, does not refuse it."""
    return [
        f"{d['field']} refused with the allowed {d['message']!r}, but that rule does not "
        f"refuse what was sent: {sent(case, d['field'])!r}"
        for d in details
        if not ALLOWED_REFUSALS[entry(d)].holds(case, d["field"])
    ]


@pytest.fixture(scope="module")
def fuzz_app(
    hub_root: Path, mongo: EmbeddedMongo, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AppServer]:
    env = {
        "MONGODB_URI": mongo.uri(),
        # Images of one step at 64x64: dozens of generated jobs stay seconds of work, so a
        # synchronous request never waits its GEN_SYNC_TIMEOUT out behind them.
        "GEN_MAX_STEPS": "1",
        "GEN_DEFAULT_STEPS": "1",
        "GEN_MAX_SIDE": str(FUZZ_MAX_SIDE),
        "GEN_QUEUE_MAX": "100",  # a full queue's 503 is tested elsewhere
        "GEN_SYNC_TIMEOUT": "60",
    }
    with ready_app(hub_root, tmp_path_factory.mktemp("fuzz"), **env) as app:
        yield app


def examples_for(operation) -> int:
    """FEW_EXAMPLES for an operation whose one input is a single parameter: its first
    examples already send what its schema allows and refuses (an id of any text, a flag that
    is not one); EXAMPLES for the rest."""
    inputs = [operation.path_parameters, operation.query, operation.headers, operation.cookies]
    if not len(operation.body) and sum(len(group) for group in inputs) == 1:
        return FEW_EXAMPLES
    return EXAMPLES


def fuzz(operation, mode: GenerationMode, base_url: str) -> list[str]:
    """Sends examples_for(operation) generated requests to one operation; returns what
    failed, one line each."""
    failures: list[str] = []
    # Hypothesis derandomises from `send`'s source, its decorators too: the decorator keeps
    # its text (this name), so its examples stay the ones it has always drawn.
    EXAMPLES = examples_for(operation)

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
              database=None, derandomize=True)  # fmt: skip
    def send(case) -> None:
        response = case.call(base_url=base_url, timeout=90)
        try:
            case.validate_response(response, checks=CHECKS)
        except (Failure, FailureGroup) as failure:
            refused = allowed_refusal(response) if mode is GenerationMode.POSITIVE else None
            if refused is None:
                failures.append(f"{operation.label} [{mode.value}]: {failure}"[:2000])
            elif wrong := unconfirmed(case, refused):
                failures.append(f"{operation.label} [{mode.value}]: {'; '.join(wrong)}"[:2000])

    try:
        send()
    except Unsatisfiable:  # nothing to negate: an operation with no parameters and no body
        assert mode is GenerationMode.NEGATIVE, operation.label
    return failures


def test_every_operation_keeps_its_documented_contract(fuzz_app: AppServer):
    schema = schemathesis.openapi.from_url(fuzz_app.url("/api/openapi.json"))
    failures = []
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            failures += fuzz(operation, mode, fuzz_app.base_url)
    assert not failures, "\n\n".join(failures)


def _sent(body: Any = None, **query: str) -> Any:
    """A stand-in for a case: what a request sent, as the confirming checks read it."""
    return SimpleNamespace(body=body, query=query or None)


def _a1111(**body: Any) -> Any:
    return _sent(body)


_CURSOR = Cursor(
    datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC), ObjectId("6638a1b2c3d4e5f607182930")
)
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
# The same bytes in another spelling: the last character's two unused bits set otherwise.
_RESPELT = _CURSOR.encode()[:-1] + _ALPHABET[_ALPHABET.index(_CURSOR.encode()[-1]) ^ 1]
# A cursor's form whose createdAt (2**62 ms) is past what a datetime holds.
_FAR = base64.urlsafe_b64encode((2**62).to_bytes(8, "big") + bytes(12)).decode().rstrip("=")
_MAX_N = django_settings.GEN_MAX_N


def _png(mode: str) -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, (8, 8)).save(buffer, format="PNG")
    return buffer.getvalue()


def _json(**body: Any) -> Any:
    """A JSON body's case (A1111's extras), as the confirming checks read it."""
    return SimpleNamespace(body=body, query=None, media_type="application/json")


_PNG64 = base64.b64encode(_png("RGB")).decode()  # 8x8


@pytest.mark.parametrize(
    ("holds", "field", "case", "refused"),
    [
        (is_blank, "todo.title", _sent({"todo": {"title": "\u200b\u00a0 \u0301"}}), True),
        (is_blank, "todos.1.title", _sent({"todos": [{"title": "a"}, {"title": "\t"}]}), True),
        (is_blank, "todos.0.title", _sent({"todos": [{"title": "a"}, {"title": "\t"}]}), False),
        (is_blank, "todo.title", _sent({"todo": {"title": " x "}}), False),
        (is_blank, "prompt", _sent({"prompt": "\ufeff\u200d"}), True),
        (is_blank, "prompt", _sent({"prompt": "\u0301e"}), False),
        (is_not_a_cursor, "after", _sent(after=_CURSOR.encode()), False),
        (is_not_a_cursor, "after", _sent(after=_RESPELT), True),
        (is_not_a_cursor, "after", _sent(after=_CURSOR.encode() + "A"), True),
        (is_not_a_cursor, "after", _sent(after=_FAR), True),
        (exceeds_batch_limit, "n_iter", _a1111(batch_size=_MAX_N, n_iter=2), True),
        (exceeds_batch_limit, "n_iter", _a1111(batch_size=None, n_iter=_MAX_N), False),
        (exceeds_batch_limit, "n_iter", _a1111(n_iter=_MAX_N), False),
        (
            is_unoffered_sampler,
            "sampler_name",
            _a1111(sampler_name="Euler", scheduler="karras"),
            True,
        ),
        (
            is_unoffered_sampler,
            "sampler_name",
            _a1111(sampler_index="LCM", scheduler="SGM Uniform"),
            True,
        ),
        (
            is_unoffered_sampler,
            "sampler_name",
            _a1111(sampler_name="DPM++ 2M", scheduler="Karras"),
            False,
        ),
        (is_unoffered_sampler, "sampler_name", _a1111(sampler_name="DDIM", scheduler=None), False),
        (is_unoffered_sampler, "sampler_name", _a1111(scheduler="karras"), False),
        (is_no_image, "image", _sent({"image": Binary(_png("RGB"))}), False),
        (is_no_image, "image", _sent({"image": Binary(b"GIF8")}), True),
        (has_no_alpha, "mask", _sent({"mask": Binary(_png("L"))}), True),
        (has_no_alpha, "mask", _sent({"mask": Binary(_png("RGBA"))}), False),
        (has_no_alpha, "mask", _sent({"mask": _png("RGB")}), True),
        (has_no_alpha, "mask", _sent({"mask": _png("L")}), True),
        (has_no_alpha, "mask", _sent({"mask": _png("RGBA")}), False),
        (has_no_alpha, "mask", _sent({"mask": _png("LA")}), False),
        (streams_more_than_one, "n", _sent({"stream": "true", "n": "4"}), True),
        (streams_more_than_one, "n", _sent({"stream": "true", "n": "1"}), False),
        (streams_more_than_one, "n", _sent({"stream": "false", "n": "4"}), False),
        (is_not_base64, "init_images", _a1111(init_images=["@@"]), True),
        (is_not_base64, "init_images", _a1111(init_images=["data:image/png;base64,AA AA"]), False),
        (is_not_base64, "mask", _a1111(mask="AAA"), True),
        (is_not_base64, "image", _a1111(image="QUJD"), False),
        (sent_no_source, "image", _sent({"scale": "2", "image_id": ""}), True),
        (sent_no_source, "image", _sent({"image": Binary(b""), "scale": "2"}), False),
        (sent_both_sources, "image_id", _sent({"image": Binary(b""), "image_id": "x"}), True),
        (sent_both_sources, "image_id", _sent({"image_id": "x"}), False),
        (sent_no_scale, "scale", _sent({"image": Binary(_png("RGB")), "width": ""}), True),
        (sent_no_scale, "scale", _sent({"height": "9"}), False),
        (sent_scale_and_size, "scale", _sent({"scale": "2", "height": "9"}), True),
        (sent_scale_and_size, "scale", _sent({"scale": "2"}), False),
        (does_not_enlarge, "width", _sent({"image": Binary(_png("RGB")), "width": "8"}), True),
        (does_not_enlarge, "width", _sent({"image": Binary(_png("RGB")), "width": "9"}), False),
        (is_past_max_side, "scale", _sent({"image": Binary(_png("RGB")), "scale": "8.1"}), True),
        (is_past_max_side, "scale", _sent({"image": Binary(_png("RGB")), "scale": "8"}), False),
        (is_past_max_side, "upscaling_resize", _json(image=_PNG64, upscaling_resize=9), True),
        (is_past_max_side, "upscaling_resize_w", _json(image=_PNG64, resize_mode=1), True),
        (
            is_past_max_side,
            "upscaling_resize_w",
            _json(
                imageList=[{"data": _PNG64}],
                resize_mode=1,
                upscaling_resize_w=16,
                upscaling_resize_h=16,
            ),
            False,
        ),
        (is_unoffered_upscaler, "upscaler_1", _a1111(upscaler_1="R-ESRGAN 4x+"), True),
        (is_unoffered_upscaler, "upscaler_1", _a1111(upscaler_1="None"), False),
        (is_unoffered_upscaler, "upscaler", _sent({"upscaler": " lanczos"}), False),
        (hires_target_refused, "hr_scale", _a1111(enable_hr=True, hr_scale=2), True),
        (hires_target_refused, "hr_scale", _a1111(enable_hr=False, hr_scale=2), False),
        (hires_target_refused, "hr_resize_x", _a1111(enable_hr=True, hr_resize_x=64), True),
        (hires_target_refused, "hr_scale", _a1111(enable_hr=True, hr_resize_x=64), False),
        (hires_target_refused, "hires_scale", _sent({"hires": "true", "size": "64x64"}), True),
        (hires_target_refused, "hires_width", _sent({"hires": "on", "hires_width": "8"}), True),
        (hires_target_refused, "hires_scale", _sent({"hires_scale": "2"}), False),
        (hires_scale_refused, "hr_scale", _a1111(enable_hr=True, hr_scale=1), True),
        (hires_scale_refused, "hr_scale", _a1111(enable_hr=True, hr_scale=1, hr_resize_x=8), False),
        (
            hires_strength_refused,
            "denoising_strength",
            _a1111(enable_hr=1, denoising_strength=0),
            True,
        ),
        (hires_strength_refused, "denoising_strength", _a1111(denoising_strength=0), False),
        (
            is_blank_id,
            "todo_id",
            SimpleNamespace(body=None, query=None, path_parameters={"todo_id": " \x1f"}),
            True,
        ),
        (
            is_blank_id,
            "todo_id",
            SimpleNamespace(body=None, query=None, path_parameters={"todo_id": "\x1fa"}),
            False,
        ),
        (estimates_an_edit, "hires", _sent(hires="true", image_size="64x64"), True),
        (estimates_an_edit, "hires", _sent(hires="true", image_size=" "), False),
        (hires_field_without_hires, "hires_steps", _sent({"hires_steps": "3"}), True),
        (
            hires_field_without_hires,
            "hires_steps",
            _sent({"hires": "1", "hires_steps": "3"}),
            False,
        ),
    ],
)
def test_each_confirming_check_refuses_what_its_rule_refuses(holds, field, case, refused):
    """The restated rules against a few inputs each, and against the service's own rule for
    the same input (a check that drifted from its rule would pass or fail fuzzing wrongly)."""
    assert holds(case, field) is refused
    value = sent(case, field)
    if holds is is_blank:
        assert text_is_blank(value) is refused
    elif holds is is_not_a_cursor:
        with pytest.raises(ValueError) if refused else nullcontext():
            Cursor.decode(value)
    elif holds is exceeds_batch_limit:
        with pytest.raises(PydanticError) if refused else nullcontext():
            Txt2ImgIn(**case.body)
    elif holds is has_no_alpha:
        with pytest.raises(FieldError) if refused else nullcontext():
            repaint_mask(file_bytes(value))
    elif holds is hires_target_refused and refused:
        body = case.body
        with pytest.raises(FieldError):
            if "hires" in body:
                first = parse_size(body.get("size", "64x64"))
                target_size(first, scale=float(body.get("hires_scale", 2)),
                            resize=(int(body.get("hires_width", 0)), 0), fields=NATIVE_FIELDS,
                            max_side=FUZZ_MAX_SIDE)  # fmt: skip
            else:
                target_size(TINY_NATIVE, scale=body.get("hr_scale"),
                            resize=(body.get("hr_resize_x", 0), 0), fields=A1111_FIELDS,
                            max_side=FUZZ_MAX_SIDE)  # fmt: skip
    elif holds is is_unoffered_sampler:
        body = case.body
        sampler = body.get("sampler_name") or body.get("sampler_index")
        with pytest.raises(UnknownScheduler) if refused else nullcontext():
            a1111_scheduler(sampler, body.get("scheduler"))
    elif holds is is_blank_id:
        with pytest.raises(IdRequired) if refused else nullcontext(), suppress(TodoNotFound):
            object_id(value)


# Hostile input: long strings built of the characters a pattern is slowest on. Each one must
# be answered (refused or served) while /health, asked beside it, answers within HEALTH_WITHIN.
HEALTH_WITHIN = 1.0
HOSTILE_BYTES = 1024 * 1024
QUERY_BYTES = 4000  # gunicorn refuses a request line past 4094 bytes before the app


def hostile_strings(size: int) -> dict[str, str]:
    """A run of digits (numbers' patterns), a run of spaces between two letters (patterns that
    skip spaces, A1111's infotext), and letters and spaces taking turns (word patterns)."""
    return {
        "digits": "1" * size,
        "spaces": "a" + " " * (size - 2) + "b",
        "words": "a " * (size // 2),
    }


def _infotext_png(text: str) -> str:
    """A PNG of one pixel carrying `text` as its compressed `parameters` chunk, in base64."""
    info = PngImagePlugin.PngInfo()
    info.add_itxt("parameters", text, zip=True)
    buffer = io.BytesIO()
    Image.new("RGB", (1, 1)).save(buffer, format="PNG", pnginfo=info)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


_SPACED_PNG = _infotext_png("a" + " " * 20_000 + "b")  # 137 bytes


@pytest.mark.parametrize(
    ("method", "path", "kwargs"),
    [
        # A guidance of 20,000 digits and a `parameters` text of 20,000 spaces between two
        # letters: each held the interpreter for seconds (a pattern that backtracks in the
        # square of the length), so /health waited with them.
        ("post", "/generate", {"data": {"prompt": "a cat", "guidance": "1" * 20_000 + "x"}}),
        ("post", "/v1/images/edits", {"data": {"prompt": "a", "strength": "1" * 20_000 + "x"}}),
        ("post", "/sdapi/v1/png-info", {"json": {"image": _SPACED_PNG}}),
    ],
    ids=["guidance", "openai-strength", "png-info"],
)  # fmt: skip
def test_inputs_that_were_slow_are_answered_with_health_beside(
    fuzz_app: AppServer, method: str, path: str, kwargs: dict[str, Any]
):
    with health_beside(fuzz_app.url("/health")) as watch:
        started = time.monotonic()
        response = requests.request(method, fuzz_app.url(path), timeout=60, **kwargs)
        took = time.monotonic() - started
        time.sleep(0.3)  # a /health asked after the answer as well
    assert response.status_code in (200, 400), response.text[:500]
    assert took < HEALTH_WITHIN, f"{path} took {took:.2f}s"
    assert watch.longest < HEALTH_WITHIN, f"/health waited {watch.longest:.2f}s"
    assert not watch.failures, watch.failures


def test_a_number_past_its_bound_is_refused_by_its_rule(fuzz_app: AppServer):
    response = requests.post(
        fuzz_app.url("/generate"), data={"prompt": "a", "guidance": "1" * 41}, timeout=30
    )
    assert response.status_code == 400
    assert {"field": "guidance", "message": NUMBER_TOO_LONG}.items() <= (
        response.json()["error"]["details"][0].items()
    )


def hostile_requests(document: dict[str, Any]) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    """For every operation of the document and every field of its body or query: (label,
    method, path, requests' arguments) sending that field each hostile string. Path
    parameters get a harmless value; file parts are images, bounded elsewhere."""
    for path, operations in document["paths"].items():
        url = re.sub(r"\{[^}]+\}", "x", path)
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "query":
                    for kind, text in hostile_strings(QUERY_BYTES).items():
                        params = {parameter["name"]: text}
                        yield (
                            f"{method} {path} ?{parameter['name']} {kind}",
                            method,
                            url,
                            {"params": params},
                        )
            for media, content in operation.get("requestBody", {}).get("content", {}).items():
                for name, schema in _properties(document, content["schema"]).items():
                    if schema.get("format") == "binary":
                        continue
                    for kind, text in hostile_strings(HOSTILE_BYTES).items():
                        label = f"{method} {path} {media} {name} {kind}"
                        if media == "application/json":
                            yield label, method, url, {"json": {name: text}}
                        elif media == "multipart/form-data":
                            yield label, method, url, {"files": {name: (None, text)}}
                        else:
                            yield label, method, url, {"data": {name: text}}


def _properties(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """A body schema's top-level properties, its `$ref` followed."""
    while "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema.get("properties", {})


def test_every_field_takes_a_megabyte_of_the_worst_characters(fuzz_app: AppServer):
    document = requests.get(fuzz_app.url("/api/openapi.json"), timeout=30).json()
    sent = list(hostile_requests(document))
    assert len(sent) > 100  # every operation's fields, not a document read wrongly
    failures: list[str] = []
    with health_beside(fuzz_app.url("/health")) as watch, requests.Session() as session:
        for label, method, url, kwargs in sent:
            started = time.monotonic()
            response = session.request(method, fuzz_app.url(url), timeout=60, **kwargs)
            took = time.monotonic() - started
            if response.status_code >= 500 or took > HEALTH_WITHIN * 5:
                failures.append(f"{label}: {response.status_code} in {took:.2f}s")
    assert not failures, "\n".join(failures)
    assert watch.longest < HEALTH_WITHIN, f"/health waited {watch.longest:.2f}s"
    assert not watch.failures, watch.failures
