"""The form of a key's secret, and its salted hash."""

import base64
import hashlib
import hmac
import secrets

PREFIX = "igk_"


def new_secret() -> tuple[str, str]:
    """A new key id and the whole secret that carries it."""
    key_id = secrets.token_hex(6)
    return key_id, f"{PREFIX}{key_id}_{secrets.token_urlsafe(32)}"


def key_id_of(secret: str) -> str | None:
    """None when the secret is not of our form."""
    if not secret.startswith(PREFIX):
        return None
    key_id, sep, rest = secret[len(PREFIX) :].partition("_")
    return key_id if sep and key_id and rest else None


def new_salt() -> str:
    return secrets.token_hex(16)


def digest(salt: str, secret: str) -> str:
    return hashlib.sha256(f"{salt}:{secret}".encode()).hexdigest()


def matches(salt: str, stored: str, secret: str) -> bool:
    return hmac.compare_digest(digest(salt, secret), stored)


def webhook_signing_secret() -> str:
    """`whsec_` and 32 random bytes in base64 (Standard Webhooks). Kept as is, since it must
    sign."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
