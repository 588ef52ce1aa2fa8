"""Cross-cutting response concerns: the version header and error shapes for unmatched routes."""

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from config.errors import NOT_FOUND, error_response
from config.version import app_version


class AppVersionHeaderMiddleware:
    """Every response carries X-App-Version, so clients can tell which release answered."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.version = app_version()

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response["X-App-Version"] = self.version
        return response


class ErrorShapeMiddleware:
    """Gives 404/405 answers that no view wrote (Django's resolver, Ninja's method check)
    the error shape of the service that owns the path."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code not in (404, 405):
            return response
        if response.get("Content-Type", "").startswith("application/json"):
            return response
        if response.status_code == 404:
            return error_response(request, 404, NOT_FOUND)
        allowed = ", ".join(sorted(m.strip() for m in response.get("Allow", "").split(",")))
        shaped = error_response(
            request, 405, f"Method {request.method} is not allowed here; allowed: {allowed}"
        )
        shaped["Allow"] = allowed
        return shaped
