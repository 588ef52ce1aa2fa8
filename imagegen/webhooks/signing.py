"""A delivery's Standard Webhooks signature, made by the `standardwebhooks` package.

So a receiver verifies with any implementation. Each secret adds a signature to the header, so
during a rotation either secret verifies."""

from datetime import UTC, datetime

from standardwebhooks.webhooks import Webhook


def signed_headers(*, msg_id: str, body: str, secrets: list[str], at: datetime) -> dict[str, str]:
    """The try's id (the same on every try), its time, and a signature per secret."""
    when = at.astimezone(UTC)
    signatures = [Webhook(secret).sign(msg_id, when, body) for secret in secrets]
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": " ".join(signatures),
    }
