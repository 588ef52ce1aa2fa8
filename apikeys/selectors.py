"""Reads of keys: who a presented secret is, and the list.

No cache, so a revoked key is refused everywhere at once. `lastUsedAt` is written at most once
a minute. Default limits are read here, so a changed default holds at the next request."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings

from apikeys import secret_form
from apikeys.documents import ApiKey, keys_collection
from core.timestamps import utc_now

LAST_USED_EVERY = timedelta(minutes=1)


@dataclass(frozen=True)
class Caller:
    """A named key, or the API_TOKEN (an admin named "API_TOKEN")."""

    name: str
    admin: bool
    max_queued: int | None = None
    per_minute: int | None = None
    scope: str = "api"
    webhook_url: str | None = None  # the key's default webhook (keys create|update --webhook)
    signs_webhooks: bool = False  # whether the key has a webhook signing secret of its own


TOKEN_CALLER = Caller(name="API_TOKEN", admin=True)


def key_caller(*, secret: str) -> Caller | None:
    """None when the secret is no live key. Raises pymongo's errors when the database is away."""
    key_id = secret_form.key_id_of(secret)
    if key_id is None:
        return None
    collection = keys_collection()
    doc = collection.find_one({"keyId": key_id, "revokedAt": None})
    if doc is None or not secret_form.matches(doc["salt"], doc["digest"], secret):
        return None
    now = utc_now()
    last = doc.get("lastUsedAt")
    if last is None or _aware(last) < now - LAST_USED_EVERY:
        collection.update_one({"_id": doc["_id"]}, {"$set": {"lastUsedAt": now}})
    return Caller(
        name=doc["name"],
        admin=bool(doc.get("admin")),
        max_queued=doc.get("maxQueued") or settings.KEY_DEFAULT_MAX_QUEUED,
        per_minute=doc.get("perMinute") or settings.KEY_DEFAULT_PER_MINUTE,
        scope=doc.get("scope") or "api",
        webhook_url=doc.get("webhookUrl"),
        signs_webhooks=bool(doc.get("webhookSecret")),
    )


def key_webhook_secret(*, name: str) -> str | None:
    """The live key's own webhook signing secret, if it has one."""
    doc = keys_collection().find_one({"name": name, "revokedAt": None}, {"webhookSecret": 1})
    return None if doc is None else doc.get("webhookSecret")


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=utc_now().tzinfo)


def key_list() -> list[ApiKey]:
    """Live and revoked, oldest first."""
    return list(ApiKey.objects.order_by("created_at"))
