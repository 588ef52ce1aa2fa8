"""What changes keys, for `manage.py keys`. A new secret is returned once and stored only hashed."""

import re
from dataclasses import dataclass

from mongoengine.errors import NotUniqueError

from apikeys import secret_form
from apikeys.documents import NAME_MAX, SCOPES, ApiKey, keys_collection
from apikeys.errors import BadKeyField, KeyNameTaken, KeyNotFound
from apikeys.secret_form import webhook_signing_secret
from core.timestamps import utc_now

NAME_RULE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class IssuedKey:
    name: str
    secret: str


def _check(
    *, name: str, admin: bool, scope: str, max_queued: int | None, per_minute: int | None
) -> None:
    if not NAME_RULE.match(name) or len(name) > NAME_MAX:
        raise BadKeyField(
            "name",
            f"1 to {NAME_MAX} letters, digits, '.', '_' or '-', starting with a letter or digit",
        )
    for field, value in (("--max-queued", max_queued), ("--per-minute", per_minute)):
        if value is not None and value < 1:
            raise BadKeyField(field, "must be at least 1 (leave it out for no limit)")
    if scope not in SCOPES:
        raise BadKeyField("--scope", f"one of {', '.join(SCOPES)}")
    if admin and scope != "api":
        raise BadKeyField("--scope", "an admin key may call every route; leave --scope out")


def key_create(
    *,
    name: str,
    admin: bool = False,
    scope: str = "api",
    max_queued: int | None = None,
    per_minute: int | None = None,
    webhook_url: str | None = None,
) -> IssuedKey:
    _check(name=name, admin=admin, scope=scope, max_queued=max_queued, per_minute=per_minute)
    _check_webhook(webhook_url)
    ApiKey.ensure_indexes()  # unique name and key id: two creates of one name cannot both win
    key_id, secret = secret_form.new_secret()
    salt = secret_form.new_salt()
    key = ApiKey(
        name=name,
        key_id=key_id,
        salt=salt,
        digest=secret_form.digest(salt, secret),
        admin=admin,
        scope=scope,
        max_queued=max_queued,
        per_minute=per_minute,
        webhook_url=webhook_url or None,
        created_at=utc_now(),
    )
    try:
        key.save(force_insert=True)
    except NotUniqueError:
        raise KeyNameTaken(name) from None
    return IssuedKey(name=name, secret=secret)


def key_revoke(*, name: str) -> None:
    """Refused from the next request on, on every replica."""
    result = keys_collection().update_one(
        {"name": name, "revokedAt": None}, {"$set": {"revokedAt": utc_now()}}
    )
    if not result.matched_count:
        raise KeyNotFound(name)


def key_rotate(*, name: str) -> IssuedKey:
    """A new secret for the same name; its jobs, images and limits stay."""
    key_id, secret = secret_form.new_secret()
    salt = secret_form.new_salt()
    change = {"keyId": key_id, "salt": salt, "digest": secret_form.digest(salt, secret)}
    result = keys_collection().update_one({"name": name, "revokedAt": None}, {"$set": change})
    if not result.matched_count:
        raise KeyNotFound(name)
    return IssuedKey(name=name, secret=secret)


def _check_webhook(url: str | None) -> None:
    """An http or https URL. Its address is checked when a job names it."""
    if url and not url.startswith(("http://", "https://")):
        raise BadKeyField("--webhook", "must be an http or https URL ('' removes it)")


def key_update(*, name: str, webhook_url: str | None = None) -> None:
    """'' removes the default webhook."""
    _check_webhook(webhook_url)
    change = {} if webhook_url is None else {"webhookUrl": webhook_url or None}
    result = keys_collection().update_one({"name": name, "revokedAt": None}, {"$set": change})
    if not result.matched_count:
        raise KeyNotFound(name)


def key_webhook_secret(*, name: str) -> str:
    """A new signing secret, used instead of WEBHOOK_SECRET; the previous one stops signing."""
    secret = webhook_signing_secret()
    result = keys_collection().update_one(
        {"name": name, "revokedAt": None}, {"$set": {"webhookSecret": secret}}
    )
    if not result.matched_count:
        raise KeyNotFound(name)
    return secret
