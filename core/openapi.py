"""OpenAPI for form bodies, as the wire carries them.

A form has no null, yet Pydantic documents optional fields as nullable. Clients then sent
"null". So optional form fields are documented as their plain type."""

from typing import Any

from pydantic import BaseModel

from core.errors import shape_of


def plain_optional(schema: dict[str, Any]) -> None:
    """Drops the null option and null default."""
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
    """The requestBody of a form route, urlencoded and multipart alike; `files` only in
    multipart."""
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
    """The 405 every path answers, in its routes' error shape (else its app's)."""
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
