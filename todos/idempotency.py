"""Idempotency-Key on todo creates: a client that got no answer it can trust (a timeout, or a
503 saying the write may have been saved) sends the same request again with the same key and
gets the first outcome, not a 409 for its own todo.

The key is stored in the created todos themselves, in the same write, so it is there exactly
when they are: a write that went through after its answer was lost is found by its key. It is
stored hashed together with the caller's credential, so another caller's equal key never
matches, and it is honoured for IDEMPOTENCY_TTL; it never appears in an answer.
"""

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
    """The stored form of the request's key (None without one); a malformed key is a 400."""
    raw = request.headers.get(HEADER)
    if raw is None:
        return None
    if not _KEY.match(raw):
        raise ValidationError([{"loc": ("header", HEADER), "msg": RULE}])
    credential = request.headers.get("Authorization", "")
    return hashlib.sha256(f"{credential}\0{raw}".encode()).hexdigest()


def stamp(documents: list[dict], key: str, now: datetime) -> None:
    """Marks documents about to be inserted as the outcome of `key`, in request order."""
    for index, document in enumerate(documents):
        document.update(
            idempotencyKey=key, idempotencyIndex=index, idempotencyExpiresAt=now + IDEMPOTENCY_TTL
        )


def outcome_query(key: str, now: datetime) -> dict:
    return {"idempotencyKey": key, "idempotencyExpiresAt": {"$gt": now}}
