"""A database of its own for each key test, this process's MongoEngine connected to it."""

import uuid
from collections.abc import Iterator

import mongoengine
import pytest

from scripts.embedded_mongo import EmbeddedMongo
from todos.connection import connect_database


@pytest.fixture
def keys_db(mongo: EmbeddedMongo, settings) -> Iterator[str]:
    """The URI of a fresh database, this process connected to it (as manage.py keys is)."""
    uri = mongo.uri(f"keys_{uuid.uuid4().hex[:12]}")
    settings.MONGODB_URI = uri
    mongoengine.disconnect()
    connect_database()
    yield uri
    mongoengine.disconnect()
