"""OpenAPI for HTML-form request bodies, stated as the wire carries them.

Pydantic documents an optional field as `anyOf [type, null]` with `default: null`, but a form
has no null: an absent or empty field is how a client leaves one out. Generated from that,
clients (and the schema fuzzer) sent the text "null". Optional form fields carry
`json_schema_extra=plain_optional`, so they are documented as their plain type, and the body
is documented with no properties beyond the declared ones, in both encodings the routes accept.
"""

from typing import Any

from pydantic import BaseModel

from core.errors import shape_of


def plain_optional(schema: dict[str, Any]) -> None:
    """A field's JSON schema without its null option and null default (pydantic calls this)."""
    options = [option for option in schema.pop("anyOf", ()) if option.get("type") != "null"]
    if len(options) == 1:
        schema.update(options[0])
    elif options:
        schema["anyOf"] = options
    if schema.get("default", ...) is None:
        del schema["default"]


def form_request_body(
    model: type[BaseModel], files: dict[str, str] | None = None, **extra: dict[str, Any]
) -> dict[str, Any]:
    """The `openapi_extra` requestBody of a route that reads `model` from a form (Ninja
    merges it into the urlencoded body it documents itself): no undeclared properties,
    `extra` for fields the route reads beside the model's (a flag, say), and the same body
    as multipart, which the route accepts too, with the file parts `files` (name:
    description) only there."""
    schema = model.model_json_schema()
    parts = {
        name: {"type": "string", "format": "binary", "description": description}
        for name, description in (files or {}).items()
    }
    multipart = {
        "type": "object",
        "properties": {**schema["properties"], **extra, **parts},
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


def png_answer(description: str) -> dict[str, Any]:
    """The `openapi_extra` of a route whose 200 is a PNG file, not JSON."""
    content = {"image/png": {"schema": {"type": "string", "format": "binary"}}}
    return {"responses": {200: {"description": description, "content": content}}}


METHOD_NOT_ALLOWED = "another method than this path takes: the Allow header lists them"


def declare_method_not_allowed(schema: dict[str, Any]) -> None:
    """Adds the 405 every path answers to a method it does not take (core.middleware), in
    the error shape of the path's own routes (the todo envelope, the image service's or
    OpenAI's error object): the shape of the operation's first declared 4xx answer, else
    the one its app registered (/health; the todos' version at /)."""
    for path, operations in schema.get("paths", {}).items():
        fallback = shape_of(path).openapi_content
        for operation in operations.values():
            responses = operation.get("responses", {})
            shaped = next(
                (r for code, r in sorted(responses.items()) if str(code).startswith("4")), None
            )
            content = shaped["content"] if shaped and "content" in shaped else fallback
            if 405 not in responses and "405" not in responses:
                responses[405] = {"description": METHOD_NOT_ALLOWED, "content": content}
