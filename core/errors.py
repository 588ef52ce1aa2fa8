"""The base exception services raise, and the error answer written from it.

Each app registers its error shape for its paths. So handlers and middleware write the right
shape without knowing any app."""

import logging
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

log = logging.getLogger("config.api")  # the name log searches know these lines by

NOT_FOUND = "Not Found"


class ServiceError(Exception):
    """A failure a service reports to its caller; `status` is its HTTP answer."""

    status: int = 500
    message: str = "Internal server error"
    retry_after: int | None = None
    # True where the job may already be queued: the answer then says how to retry safely.
    may_follow_a_queued_job: bool = False

    def __init__(self, message: str | None = None, *, retry_after: int | None = None) -> None:
        self.message = message or self.message
        if retry_after is not None:
            self.retry_after = retry_after
        super().__init__(self.message)


class FieldError(ServiceError):
    """A 400 naming the field and a rule no schema can check, shaped like a schema's refusal."""

    status = 400

    def __init__(self, field: str, rule: str) -> None:
        self.field, self.rule = field, rule
        super().__init__(f"Invalid request: {field}: {rule}")


_MESSAGE = {
    "type": "object",
    "required": ["message"],
    "properties": {"message": {"type": "string"}},
}
PLAIN_ERROR_CONTENT = {
    "application/json": {
        "schema": {"type": "object", "required": ["error"], "properties": {"error": _MESSAGE}}
    }
}
ERROR_MESSAGE_SCHEMA = _MESSAGE


class ErrorShape:
    """`{"error": {"message", "details"?}}`; a service with another shape overrides `body` and
    `finish`."""

    # The body documented for an answer no route declares (a 405).
    openapi_content: dict[str, Any] = PLAIN_ERROR_CONTENT
    unauthorized_message = "A valid 'Authorization: Bearer <token>' is required"

    def body(self, status: int, message: str, details: list[dict[str, str]] | None) -> dict:
        error: dict[str, Any] = {"message": message}
        if details is not None:
            error["details"] = details
        return {"error": error}

    def finish(self, response: HttpResponse, retry_after: int | None) -> None:
        """Headers this shape adds to every error answer."""


PLAIN = ErrorShape()
_registered: list[tuple[tuple[str, ...], tuple[str, ...], ErrorShape]] = []


def register_error_shape(
    shape: ErrorShape, *, paths: tuple[str, ...] = (), prefixes: tuple[str, ...] = ()
) -> None:
    """Called by an app when ready, for `paths` and paths under `prefixes`."""
    _registered.append((paths, prefixes, shape))


def shape_of(path: str) -> ErrorShape:
    for paths, prefixes, shape in _registered:
        if path in paths or path.startswith(prefixes):
            return shape
    return PLAIN


def error_response(
    request: HttpRequest,
    status: int,
    message: str,
    *,
    details: list[dict[str, str]] | None = None,
    retry_after: int | None = None,
) -> JsonResponse:
    shape = shape_of(request.path)
    response = JsonResponse(shape.body(status, message, details), status=status)
    if retry_after is not None:
        response["Retry-After"] = str(retry_after)
    shape.finish(response, retry_after)
    return response


def unexpected_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    """A 500, logged with its traceback."""
    log.exception("unhandled error on %s %s", request.method, request.path)
    return error_response(request, 500, "Internal server error")
