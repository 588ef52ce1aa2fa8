"""A database of a test module's own, this process's MongoEngine connected to it (to make API
keys there as manage.py keys does); the apps under test are given its URI."""

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import mongoengine

from imagegen.generation.rates import WINDOW_SECONDS
from scripts.embedded_mongo import EmbeddedMongo
from todos.connection import connect_database

T = TypeVar("T")


@contextmanager
def connected_database(mongo: EmbeddedMongo, prefix: str) -> Iterator[str]:
    """Its URI; MONGODB_URI is this process's setting again afterwards."""
    from django.conf import settings

    uri = mongo.uri(f"{prefix}_{uuid.uuid4().hex[:12]}")
    before = settings.MONGODB_URI
    settings.MONGODB_URI = uri
    mongoengine.disconnect()
    connect_database()
    try:
        yield uri
    finally:
        mongoengine.disconnect()
        settings.MONGODB_URI = before


def in_one_minute(attempt: Callable[[int], T], tries: int = 3) -> T:
    """The result of `attempt(n)` from a try that began and ended in one clock minute.
    A per-minute limit counts in fixed windows of the clock's minutes
    (imagegen/generation/rates.py): a try across a window's edge proves nothing, so it is
    run again (n counts the tries: make its keys afresh) instead of waiting for a new minute."""
    for n in range(tries):
        began = time.time() // WINDOW_SECONDS
        result = attempt(n)
        if time.time() // WINDOW_SECONDS == began:
            return result
    raise AssertionError(f"no try of {tries} stayed within one minute")
