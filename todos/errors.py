"""What the todo services refuse, the todo error envelope, and the answer to a silent database."""

import logging
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from pymongo.errors import ConnectionFailure, PyMongoError, ServerSelectionTimeoutError

from core.errors import (
    ERROR_MESSAGE_SCHEMA,
    NOT_FOUND,
    ErrorShape,
    ServiceError,
    error_response,
    register_error_shape,
    unexpected_error,
)
from core.logs import first_part
from todos import metrics

log = logging.getLogger("config.api")  # the name log searches know these lines by


class IdRequired(ServiceError):
    status = 400
    message = "id is required"


class TodoNotFound(ServiceError):
    status = 404
    message = "Todo not found"


class TitleTaken(ServiceError):
    status = 409

    def __init__(self, title: str | None = None) -> None:
        if title is None:
            super().__init__("title must be unique: one of the titles is already taken")
        else:
            super().__init__(f"title must be unique: {title!r} is already taken")


class TitleDuplicated(TitleTaken):
    """One title twice in one batch. No todo has it yet, so "already taken" would mislead.

    The message names both places."""

    def __init__(self, title: str, first: int, second: int) -> None:
        ServiceError.__init__(
            self,
            f"title must be unique: {title!r} is duplicated within the batch: "
            f"todos.{first}.title and todos.{second}.title",
        )


class IdempotencyKeyReused(ServiceError):
    status = 409
    message = (
        "This Idempotency-Key was already used for a different request; use a new key for new todos"
    )


class TodoEnvelope(ErrorShape):
    """`{"data": null, "error": {"message", "details"?}}`.

    Unmatched todo paths get the contract's exact `{"data": null, "error": "Not Found"}`."""

    openapi_content = {
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["data", "error"],
                "properties": {"data": {"type": "null"}, "error": ERROR_MESSAGE_SCHEMA},
            }
        }
    }

    def body(self, status: int, message: str, details: list[dict[str, str]] | None) -> dict:
        body = super().body(status, message, details)
        if status == 404 and message == NOT_FOUND:
            return {"data": None, "error": NOT_FOUND}
        return {"data": None, **body}


def register_error_shapes() -> None:
    """The todo paths: the version at /, /todo and /todos and below."""
    register_error_shape(
        TodoEnvelope(), paths=("/", "/todo", "/todos"), prefixes=("/todo/", "/todos/")
    )


DATABASE_UNREACHABLE = "The database is unreachable; try again shortly"
WRITES = {"POST", "PUT", "PATCH", "DELETE"}
UNCONFIRMED = (
    "The database did not confirm this write in time: it may or may not have been saved. "
    "Check before sending it again, or send it again with the same Idempotency-Key"
)


def on_database_error(request: HttpRequest, exc: PyMongoError) -> HttpResponse:
    """A database that does not answer in time is a 503.

    A write that was sent may have been applied. Then the answer must not say "just retry":
    the retry would meet its own todo."""
    if not (exc.timeout or isinstance(exc, ConnectionFailure)):
        return unexpected_error(request, exc)
    log.warning("database unreachable: %s", first_part(exc))
    metrics.TODO_REFUSED.labels(reason="unreachable").inc()
    sent = not isinstance(exc, ServerSelectionTimeoutError)
    message = UNCONFIRMED if sent and request.method in WRITES else DATABASE_UNREACHABLE
    return error_response(request, 503, message, retry_after=5)


EXCEPTION_HANDLERS: dict[type[Exception], Callable[[HttpRequest, Any], HttpResponse]] = {
    PyMongoError: on_database_error
}
