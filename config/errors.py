"""One error shape per service, and the base exception services raise to produce it.

The todo service answers in its `{data, error}` envelope; the image service answers
`{"error": {"message": ...}}`. Which one applies is decided by the request path, in one place,
so the exception handlers and the fallback middleware always agree.
"""

from typing import Any

from django.http import HttpRequest, JsonResponse

TODO_PREFIXES = ("/todo/", "/todos/")
TODO_PATHS = ("/", "/todo", "/todos")
NOT_FOUND = "Not Found"


class ServiceError(Exception):
    """A failure a service reports to its caller; `status` is the HTTP answer it maps to."""

    status: int = 500
    message: str = "Internal server error"
    retry_after: int | None = None

    def __init__(self, message: str | None = None, *, retry_after: int | None = None) -> None:
        self.message = message or self.message
        if retry_after is not None:
            self.retry_after = retry_after
        super().__init__(self.message)


def is_todo_path(path: str) -> bool:
    return path in TODO_PATHS or path.startswith(TODO_PREFIXES)


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
    else:
        body = {"error": error}
    response = JsonResponse(body, status=status)
    if retry_after is not None:
        response["Retry-After"] = str(retry_after)
    return response
