"""The todo routes' database budget, applied by the todo router, so no other route pays for it."""

import functools
import threading
from collections.abc import Callable
from typing import Any

import mongoengine
import pymongo
from django.conf import settings
from django.http import HttpRequest, HttpResponseBase

from core.errors import error_response
from todos import metrics


@functools.cache
def _slots_of(size: int) -> threading.BoundedSemaphore:
    return threading.BoundedSemaphore(size)


def _database_slots() -> threading.BoundedSemaphore:
    """TODO_MAX_CONCURRENT's places, read per request; requests in flight keep theirs."""
    return _slots_of(settings.TODO_MAX_CONCURRENT)


def database_budget(
    run: Callable[..., HttpResponseBase],
) -> Callable[..., HttpResponseBase]:
    """Bounds what a database outage can cost, around the whole operation.

    One deadline for all of a request's database work, retries included. At most
    TODO_MAX_CONCURRENT wait at once; the next gets 503. So /health keeps its threads."""

    @functools.wraps(run)
    def budgeted(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        slots = _database_slots()
        if not slots.acquire(blocking=False):
            metrics.TODO_REFUSED.labels(reason="busy").inc()
            return error_response(
                request, 503, "Too many todo requests are waiting for the database; try again "
                "shortly", retry_after=5,
            )  # fmt: skip
        try:
            # With no server known, the request gets MONGODB_TIMEOUT_MS in all. Inside
            # pymongo.timeout() server selection ignores serverSelectionTimeoutMS. A down database
            # would otherwise cost five times the setting before the 503.
            timeout_ms = settings.MONGODB_TIMEOUT_MS
            budget = timeout_ms * 5 / 1000 if database_known() else timeout_ms / 1000
            with pymongo.timeout(budget):
                return run(request, *args, **kwargs)
        finally:
            slots.release()

    return budgeted


def database_known() -> bool:
    """Free: pymongo's last view of the topology."""
    return mongoengine.get_connection().topology_description.has_writable_server()
