"""One error shape per service, and the base exception services raise to produce it.

The todo service answers in its `{data, error}` envelope; the image service answers
`{"error": {"message": ...}}`, and its OpenAI-compatible routes under /v1/ answer OpenAI's
`{"error": {"message", "type", "param", "code"}}` (with `details` on a validation error). Which
one applies is decided by the request path, in one place, so the exception handlers and the
fallback middleware always agree.
"""

from typing import Any

from django.http import HttpRequest, JsonResponse

TODO_PREFIXES = ("/todo/", "/todos/")
TODO_PATHS = ("/", "/todo", "/todos")
OPENAI_PREFIX = "/v1/"
A1111_PREFIX = "/sdapi/v1/"
NOT_FOUND = "Not Found"
# OpenAI's error `code` by status, as its API writes them (the SDK picks its exception
# class by status alone).
OPENAI_CODES = {401: "invalid_api_key", 404: "not_found", 503: "service_unavailable",
                504: "timeout"}  # fmt: skip


class ServiceError(Exception):
    """A failure a service reports to its caller; `status` is the HTTP answer it maps to."""

    status: int = 500
    message: str = "Internal server error"
    retry_after: int | None = None
    # True where the failure may come after a generating request's job was queued (a store
    # too busy to answer the read that follows): its answer then says how to retry safely.
    may_follow_a_queued_job: bool = False

    def __init__(self, message: str | None = None, *, retry_after: int | None = None) -> None:
        self.message = message or self.message
        if retry_after is not None:
            self.retry_after = retry_after
        super().__init__(self.message)


class FieldError(ServiceError):
    """A request field that breaks a rule no schema can check (an uploaded file that is not
    an image, a mask of another size): a 400 naming the field and the rule, in the same
    shape as a schema's refusal."""

    status = 400

    def __init__(self, field: str, rule: str) -> None:
        self.field, self.rule = field, rule
        super().__init__(f"Invalid request: {field}: {rule}")


DATABASE_UNREACHABLE = "The database is unreachable; try again shortly"


def is_todo_path(path: str) -> bool:
    return path in TODO_PATHS or path.startswith(TODO_PREFIXES)


def is_openai_path(path: str) -> bool:
    return path.startswith(OPENAI_PREFIX)


def takes_basic_auth(path: str) -> bool:
    """The AUTOMATIC1111 routes, which take the token as Basic's password too (config.auth)."""
    return path.startswith(A1111_PREFIX)


def openai_error(status: int, message: str, details: list[dict[str, str]] | None) -> dict:
    if status >= 500:
        kind = "server_error"
    else:
        kind = "rate_limit_error" if status == 429 else "invalid_request_error"
    error: dict[str, Any] = {
        "message": message,
        "type": kind,
        "param": details[0]["field"] if details else None,
        "code": OPENAI_CODES.get(status),
    }
    if details is not None:  # every failing field, as the service's other answers list them
        error["details"] = details
    return error


def error_response(
    request: HttpRequest,
    status: int,
    message: str,
    *,
    details: list[dict[str, str]] | None = None,
    retry_after: int | None = None,
) -> JsonResponse:
    error: dict[str, Any] = {"message": message}
    if details is not None:
        error["details"] = details
    if is_todo_path(request.path):
        body: dict[str, Any] = {"data": None, "error": error}
        if status == 404 and message == NOT_FOUND:
            body["error"] = NOT_FOUND  # the seed's exact body for unmatched todo paths
    elif is_openai_path(request.path):
        body = {"error": openai_error(status, message, details)}
    else:
        body = {"error": error}
    response = JsonResponse(body, status=status)
    if retry_after is not None:
        response["Retry-After"] = str(retry_after)
    if is_openai_path(request.path):
        # The openai SDK retries 408, 409, 429 and 5xx answers (twice, by default) unless
        # this header says otherwise. The rule: an answer with Retry-After (a full queue, a
        # load under way, a lost worker, the job store unreachable) is worth retrying then;
        # any other would only repeat work (a generation that timed out or raised starts
        # over, a 409 without weights stays one).
        response["x-should-retry"] = "false" if retry_after is None else "true"
    return response
