"""Cross-cutting response concerns: the version header and error shapes for unmatched routes."""

import logging
import time
from collections.abc import Callable
from http import HTTPStatus

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from core import request_context
from core.errors import NOT_FOUND, error_response
from core.logs import is_quiet_poll
from core.version import app_version

request_log = logging.getLogger("config.requests")  # the name log searches know


class RequestIdMiddleware:
    """Every answer carries X-Request-ID, the client's when valid, so one id follows a request.

    With LOG_FORMAT=json each request also ends with one log line."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.log_requests = settings.LOG_FORMAT == "json"

    def __call__(self, request: HttpRequest) -> HttpResponse:
        rid = request_context.accepted_request_id(
            request.headers.get(request_context.REQUEST_ID_HEADER)
        )
        started = time.monotonic()
        with request_context.request_scope(rid=rid, path=request.path):
            response = self.get_response(request)
            response[request_context.REQUEST_ID_HEADER] = rid
            if self.log_requests:
                query = request.META.get("QUERY_STRING", "")
                poll = is_quiet_poll(request.method or "", request.path, query)
                poll = poll and response.status_code < 400  # the page's poll: debug only
                request_log.log(
                    logging.DEBUG if poll else logging.INFO,
                    "%s %s %d", request.method, request.path, response.status_code,
                    extra={"status": response.status_code,
                           "duration": round(time.monotonic() - started, 6)},
                )  # fmt: skip
        return response

    def process_view(self, request: HttpRequest, *_: object) -> None:
        """The route template, for every log line of the request."""
        match = request.resolver_match
        if match is not None and match.route:
            request_context.route.set("/" + match.route)


class AppVersionHeaderMiddleware:
    """X-App-Version, so clients can tell which release answered."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.version = app_version()

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response["X-App-Version"] = self.version
        return response


class ErrorShapeMiddleware:
    """Gives answers no view of ours wrote the path's error shape, so a client never parses HTML.

    That covers Django's 404, 500 and host check, and Ninja's 405."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        status = response.status_code
        if status < 400 or response.get("Content-Type", "").startswith("application/json"):
            return response
        if status == 404:
            return error_response(request, 404, NOT_FOUND)
        if status == 405:
            allowed = ", ".join(sorted(m.strip() for m in response.get("Allow", "").split(",")))
            shaped = error_response(
                request, 405, f"Method {request.method} is not allowed here; allowed: {allowed}"
            )
            shaped["Allow"] = allowed
            return shaped
        return error_response(request, status, HTTPStatus(status).phrase)


class HeadAsGetMiddleware:
    """HEAD is GET without the body (RFC 9110), so every GET route answers HEAD too."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method != "HEAD":
            return self.get_response(request)
        request.method = "GET"
        try:
            return self.get_response(request)
        finally:
            request.method = "HEAD"
