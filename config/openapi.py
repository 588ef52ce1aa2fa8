"""OpenAPI for HTML-form request bodies, stated as the wire carries them.

Pydantic documents an optional field as `anyOf [type, null]` with `default: null`, but a form
has no null: an absent or empty field is how a client leaves one out. Generated from that,
clients (and the schema fuzzer) sent the text "null". Optional form fields carry
`json_schema_extra=plain_optional`, so they are documented as their plain type, and the body
is documented with no properties beyond the declared ones, in both encodings the routes accept.
"""

from typing import Any

from pydantic import BaseModel


def plain_optional(schema: dict[str, Any]) -> None:
    """A field's JSON schema without its null option and null default (pydantic calls this)."""
    options = [option for option in schema.pop("anyOf", ()) if option.get("type") != "null"]
    if len(options) == 1:
        schema.update(options[0])
    elif options:
        schema["anyOf"] = options
    if schema.get("default", ...) is None:
        del schema["default"]


def form_request_body(model: type[BaseModel], **extra: dict[str, Any]) -> dict[str, Any]:
    """The `openapi_extra` requestBody of a route that reads `model` from a form (Ninja
    merges it into the urlencoded body it documents itself): no undeclared properties,
    `extra` for fields the route reads beside the model's (a flag, say), and the same body
    as multipart, which the route accepts too."""
    schema = model.model_json_schema()
    multipart = {
        "type": "object",
        "properties": {**schema["properties"], **extra},
        "required": schema.get("required", []),
        "additionalProperties": False,
    }
    urlencoded = {"properties": extra, "additionalProperties": False}
    return {
        "content": {
            "application/x-www-form-urlencoded": {"schema": urlencoded},
            "multipart/form-data": {"schema": multipart},
        }
    }
