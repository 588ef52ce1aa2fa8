"""Idempotency-Key on todo creates: a retry gets the first outcome, not a 409 for its own todo.

The key is written with the todos, so a write whose answer was lost is found by it. It is
hashed with the caller's credential, so another caller's equal key never matches."""

import hashlib
import re
from datetime import datetime, timedelta

from django.http import HttpRequest
from ninja.errors import ValidationError

HEADER = "Idempotency-Key"
IDEMPOTENCY_TTL = timedelta(hours=24)
_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")
RULE = "must be 1 to 255 visible ASCII characters"


def idempotency_key(request: HttpRequest) -> str | None:
    """None without a key; a malformed one is a 400."""
    raw = request.headers.get(HEADER)
    if raw is None:
        return None
    if not _KEY.match(raw):
        raise ValidationError([{"loc": ("header", HEADER), "msg": RULE}])
    credential = request.headers.get("Authorization", "")
    return hashlib.sha256(f"{credential}\0{raw}".encode()).hexdigest()


def stamp(documents: list[dict], key: str, now: datetime) -> None:
    """Marks documents about to be inserted as `key`'s outcome, in request order."""
    for index, document in enumerate(documents):
        document.update(
            idempotencyKey=key, idempotencyIndex=index, idempotencyExpiresAt=now + IDEMPOTENCY_TTL
        )


def outcome_query(key: str, now: datetime) -> dict:
    return {"idempotencyKey": key, "idempotencyExpiresAt": {"$gt": now}}
