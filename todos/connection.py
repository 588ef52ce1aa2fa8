"""Connects MongoEngine to MONGODB_URI without waiting for the server.

So the service starts with the database down. Requests meanwhile answer 503, not hang."""

import mongoengine
from django.conf import settings
from pymongo.uri_parser import parse_uri

DEFAULT_DATABASE = "todos"


def database_name(uri: str) -> str:
    return parse_uri(uri).get("database") or DEFAULT_DATABASE


def connect_database() -> None:
    uri = settings.MONGODB_URI
    timeout = settings.MONGODB_TIMEOUT_MS
    mongoengine.connect(
        db=database_name(uri),
        host=uri,
        tz_aware=True,
        serverSelectionTimeoutMS=timeout,
        connectTimeoutMS=timeout,
        # A hung server (a failover, a half-open connection) must not hold a thread forever.
        socketTimeoutMS=timeout * 5,
        uuidRepresentation="standard",
    )
