"""The todo routes' database budget, applied by the todo router to each of its operations
(todos.api), so no other route pays for it and nothing picks requests by their path."""

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
    """TODO_MAX_CONCURRENT's places, read at each request: a changed setting takes effect in
    the running process (its requests in flight keep the places they took)."""
    return _slots_of(settings.TODO_MAX_CONCURRENT)


def database_budget(
    run: Callable[..., HttpResponseBase],
) -> Callable[..., HttpResponseBase]:
    """Bounds what a database outage can cost. Every todo request gets one deadline for all
    of its database work (pymongo's client-side operation timeout: a transaction's retries
    included, which otherwise go on for 120 s), and at most TODO_MAX_CONCURRENT of them wait on
    the database at once; the next gets 503 at once. So neither a request nor all of the
    worker's threads can be held by a dead database: /health and the image routes keep theirs.
    Wraps an operation's whole run (auth, a key's lookup included) as a router decorator."""

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
            # With no server known (down, or not reached yet) the request gets MONGODB_TIMEOUT_MS
            # in all: inside pymongo.timeout() server selection waits the whole deadline,
            # ignoring serverSelectionTimeoutMS, so a database that is down would otherwise cost
            # every todo request five times what the setting says before its 503.
            timeout_ms = settings.MONGODB_TIMEOUT_MS
            budget = timeout_ms * 5 / 1000 if database_known() else timeout_ms / 1000
            with pymongo.timeout(budget):
                return run(request, *args, **kwargs)
        finally:
            slots.release()

    return budgeted


def database_known() -> bool:
    """Whether pymongo knows a server to write to now (free: its last view of the topology)."""
    return mongoengine.get_connection().topology_description.has_writable_server()
