"""POST /generate's body: the contract's form (urlencoded or multipart), or the same fields as one
JSON object (`Content-Type: application/json`), as /v1 and /sdapi take theirs.

Both go through the same schema, so the rules and the answers are the same. JSON values are
of the types the OpenAPI document states (`"steps": true` is refused rather than read as 1;
null counts as absent), and an edit's `image` and `mask` come as base64 text.
"""

import functools
import json
from typing import Any

from django.http import HttpRequest
from ninja.errors import ValidationError
from ninja.params.models import Form, FormModel
from pydantic import BaseModel

from core.errors import FieldError
from imagegen.api.protocol import NOT_BASE64, decode_base64
from imagegen.generation.prompt_tags import LoraTag, lora_item

JSON_TYPE = "application/json"
FLAG = "async"  # read beside the schema's fields (imagegen.api.native.wants_async)
FILE_PARTS = ("image", "mask")
HIRES = "hires"  # an object in JSON, its keys the form's hires_* fields
JSON_ONLY = ("loras",)  # a list of objects: no form field can carry it (json_loras)
LORAS_RULE = 'must be a list of {"name": "...", "weight": a number in [-4, 4]} (weight optional)'
NOT_AN_OBJECT = "must be a JSON object of the form's fields"
_PARSED = "_generate_json"  # where the request keeps its parsed body


def sends_json(request: HttpRequest) -> bool:
    return request.content_type == JSON_TYPE


def json_fields(request: HttpRequest) -> dict[str, Any]:
    """The body's object, parsed once per request (a base64 image can be megabytes)."""
    parsed = getattr(request, _PARSED, None)
    if parsed is None:
        try:
            parsed = json.loads(request.body)
        except ValueError:
            raise FieldError("body", "must be a JSON document") from None
        if not isinstance(parsed, dict):
            raise FieldError("body", NOT_AN_OBJECT)
        parsed = with_hires_fields(parsed)
        setattr(request, _PARSED, parsed)
    return parsed


def with_hires_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """A `hires` object as the form's fields: `{"hires": {"scale": 2}}` is `hires: true,
    hires_scale: 2` (an unknown key is then refused by its field's name)."""
    hires = fields.get(HIRES)
    if not isinstance(hires, dict):
        return fields
    return {**fields, HIRES: True, **{f"{HIRES}_{key}": value for key, value in hires.items()}}


def sent_names(request: HttpRequest) -> tuple[list[str], list[str]]:
    """The text fields and the file parts sent (not `async`), as the schema's unknown-field
    check takes them; in JSON the edit's images are its file parts."""
    if sends_json(request):
        sent = [name for name, value in json_fields(request).items() if value is not None]
        fields = [name for name in sent if name not in (*FILE_PARTS, *JSON_ONLY, FLAG)]
        return fields, [name for name in sent if name in FILE_PARTS]
    fields = [name for name in request.POST if name != FLAG]
    return fields, [name for name, parts in request.FILES.lists() for _ in parts]


def sent_flag(request: HttpRequest) -> str | bool | None:
    """`async` as the body carries it (form text, or JSON's true or false); None when absent
    or empty. In JSON another value is refused, as the schema's booleans are there."""
    if not sends_json(request):
        return request.POST.get(FLAG) or None
    value = json_fields(request).get(FLAG)
    if value is not None and not isinstance(value, bool):
        raise FieldError(FLAG, f"must be true or false; got {json.dumps(value)}")
    return value


def sent_text(request: HttpRequest, name: str) -> str | None:
    """A text field from the query, a form or a JSON object; None when absent or empty.

    A JSON body is read, not ignored: a client sending {"model": ...} must not get the default."""
    value: Any = request.GET.get(name) or None
    if value is None:
        if not sends_json(request):
            value = request.POST.get(name)
        elif request.body.strip():  # an empty JSON post is a post with no fields
            value = json_fields(request).get(name)
    if value is not None and not isinstance(value, str):
        raise FieldError(name, f"must be a string; got {json.dumps(value)}")
    return value or None


def json_loras(request: HttpRequest) -> list[LoraTag]:
    """A JSON body's `loras`, `[{"name": ..., "weight": ...}]` (weight 1 when absent), each
    checked as a prompt's tag is; none for a form. Refused as a whole, naming `loras`, when it
    is not that shape."""
    if not sends_json(request) or (value := json_fields(request).get("loras")) is None:
        return []
    if not isinstance(value, list):
        raise FieldError("loras", f"{LORAS_RULE}; got {json.dumps(value)[:200]}")
    tags = []
    for item in value:
        weight = item.get("weight") if isinstance(item, dict) else None
        if (
            not isinstance(item, dict)
            or set(item) - {"name", "weight"}
            or not isinstance(item.get("name"), str)
            or len(item["name"]) > 200
            or isinstance(weight, bool)
            or not isinstance(weight, int | float | None)
        ):
            raise FieldError("loras", f"{LORAS_RULE}; got {json.dumps(item)[:200]}")
        tags.append(lora_item(item["name"], weight))
    return tags


def edit_inputs(request: HttpRequest) -> tuple[bytes | None, bytes | None]:
    """The image's and the mask's bytes (None for one not sent): file parts of a form,
    base64 text in JSON."""
    if not sends_json(request):
        image, mask = request.FILES.get("image"), request.FILES.get("mask")
        return (None if image is None else image.read()), (None if mask is None else mask.read())
    fields = json_fields(request)
    return _base64(fields.get("image"), field="image"), _base64(fields.get("mask"), field="mask")


def _base64(text: Any, *, field: str) -> bytes | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise FieldError(field, NOT_BASE64)
    return decode_base64(text, field=field)


class FormOrJsonModel(FormModel):
    """Ninja's form parameters, read from a JSON object when the body is one."""

    @classmethod
    def resolve(cls, request: HttpRequest, api: Any, path_params: dict[str, Any]) -> Any:
        if not sends_json(request):
            return super().resolve(request, api, path_params)
        fields = json_fields(request)
        if refused := json_type_errors(fields, cls.documented_types()):
            raise ValidationError(refused)
        data = cls._map_data_paths(fields)  # unknown names and nulls drop out
        return cls.model_validate(data, context={"request": request})

    @classmethod
    def documented_types(cls) -> dict[str, str]:
        """Each field's JSON type as the OpenAPI document states it."""
        types: dict[str, str] = {}
        for field in cls.model_fields.values():
            if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
                types.update(_json_types(field.annotation))
        return types


@functools.cache
def _json_types(model: type[BaseModel]) -> dict[str, str]:
    return {
        name: schema.get("type", "")
        for name, schema in model.model_json_schema()["properties"].items()
    }


def json_type_errors(fields: dict[str, Any], types: dict[str, str]) -> list[dict[str, Any]]:
    """A pydantic error for each value not of its field's JSON type: the schema alone would
    read `true` as 1 step and "4" as 4 (a whole number written 4.0 is an integer)."""
    return [
        {"loc": ("form", name), "msg": f"Input should be a valid {types[name]}", "type": "type"}
        for name, value in fields.items()
        if value is not None and name in types and not _is_json_type(value, types[name])
    ]


def _is_json_type(value: Any, kind: str) -> bool:
    if kind == "boolean" or isinstance(value, bool):
        return kind == "boolean" and isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if kind == "number":
        return isinstance(value, int | float)
    if kind == "string":
        return isinstance(value, str)
    return True  # a type the document leaves open: the schema decides


class FormOrJson(Form):  # type: ignore[misc]
    """`Annotated[Schema, FormOrJson(...)]`: a form parameter that also takes JSON; the
    OpenAPI document states it as a form (the route adds the JSON body to it)."""

    _model = FormOrJsonModel

    @classmethod
    def _param_source(cls) -> str:
        return "form"
