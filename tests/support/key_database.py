"""A database of a test module's own, this process's MongoEngine connected to it (to make API
keys there as manage.py keys does); the apps under test are given its URI."""

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import mongoengine

from scripts.embedded_mongo import EmbeddedMongo
from todos.connection import connect_database


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
