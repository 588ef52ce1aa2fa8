"""Cross-cutting response concerns: the version header and error shapes for unmatched routes."""

import threading
from collections.abc import Callable
from http import HTTPStatus

import mongoengine
import pymongo
from django.conf import settings
from django.http import HttpRequest, HttpResponse

from config.errors import NOT_FOUND, error_response, is_todo_path
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
    """Gives error answers that no view of ours wrote (Django's resolver and host check,
    Ninja's method check, Django's own 500 page) the error shape of the service that owns
    the path, so a client never has to parse HTML."""

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
    """HEAD is GET without the body (RFC 9110), so every GET route answers HEAD too: the
    request is routed as GET, and gunicorn sends the headers only."""

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


class DatabaseBudgetMiddleware:
    """Bounds what a database outage can cost. Every todo request gets one deadline for all
    of its database work (pymongo's client-side operation timeout: a transaction's retries
    included, which otherwise go on for 120 s), and at most TODO_MAX_CONCURRENT of them wait on
    the database at once; the next gets 503 at once. So neither a request nor all of the
    worker's threads can be held by a dead database: /health and the image routes keep theirs."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.deadline = settings.MONGODB_TIMEOUT_MS * 5 / 1000
        self.slots = threading.BoundedSemaphore(settings.TODO_MAX_CONCURRENT)

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path == "/" or not is_todo_path(request.path):
            return self.get_response(request)
        if not self.slots.acquire(blocking=False):
            return error_response(
                request, 503, "Too many todo requests are waiting for the database; try again "
                "shortly", retry_after=5,
            )  # fmt: skip
        try:
            # With no server known (down, or not reached yet) the request gets MONGODB_TIMEOUT_MS
            # in all: inside pymongo.timeout() server selection waits the whole deadline,
            # ignoring serverSelectionTimeoutMS, so a database that is down would otherwise cost
            # every todo request five times what the setting says before its 503.
            budget = self.deadline if database_known() else settings.MONGODB_TIMEOUT_MS / 1000
            with pymongo.timeout(budget):
                return self.get_response(request)
        finally:
            self.slots.release()


def database_known() -> bool:
    """Whether pymongo knows a server to write to now (free: its last view of the topology)."""
    return mongoengine.get_connection().topology_description.has_writable_server()
