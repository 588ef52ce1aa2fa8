"""A delivery's signature as the Standard Webhooks specification says: HMAC-SHA256 over
`id.timestamp.body` with each `whsec_` secret, made by the `standardwebhooks` package, so a
receiver verifies with that same package (or any implementation of the specification).

Several secrets (WEBHOOK_SECRET during a rotation) each add a signature to the one
`webhook-signature` header, space-separated, as the specification allows: a receiver that
knows either secret accepts the delivery."""

from datetime import UTC, datetime

from standardwebhooks.webhooks import Webhook


def signed_headers(*, msg_id: str, body: str, secrets: list[str], at: datetime) -> dict[str, str]:
    """The three headers of one try: its id (the same on every try), its time, and one
    signature per secret."""
    when = at.astimezone(UTC)
    signatures = [Webhook(secret).sign(msg_id, when, body) for secret in secrets]
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": " ".join(signatures),
    }
