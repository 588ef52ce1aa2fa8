"""Connects MongoEngine to MONGODB_URI without waiting for the server.

pymongo connects lazily and reconnects by itself, so the service starts while the database
is down and recovers when it comes back; requests in between answer 503 after
MONGODB_TIMEOUT_MS instead of hanging.
"""

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
