"""How an API key is stored: a salted hash of its secret, never the secret.

The key id is public and indexed, so a lookup is one read. The 256 random bits leave nothing
to brute force, so SHA-256 suffices. A revoked key's name is never reused: it owns jobs and
images."""

from mongoengine import BooleanField, DateTimeField, Document, IntField, StringField
from pymongo.collection import Collection

NAME_MAX = 64
# What a non-admin key may call. "api": every route but the admin's own. "metrics": /metrics alone.
SCOPES = ("api", "metrics")


class ApiKey(Document):
    name = StringField(required=True, max_length=NAME_MAX, unique=True)
    key_id = StringField(db_field="keyId", required=True, unique=True)
    salt = StringField(required=True)
    digest = StringField(required=True)
    admin = BooleanField(default=False)
    scope = StringField(choices=SCOPES, null=True)  # None: "api" (keys made before scopes)
    max_queued = IntField(db_field="maxQueued", null=True)
    per_minute = IntField(db_field="perMinute", null=True)
    created_at = DateTimeField(db_field="createdAt", required=True)
    last_used_at = DateTimeField(db_field="lastUsedAt", null=True)
    revoked_at = DateTimeField(db_field="revokedAt", null=True)
    # Where the key's async jobs are told they ended, and the secret that signs it. Kept as is,
    # since it must sign; made and shown only by `keys webhook-secret`.
    webhook_url = StringField(db_field="webhookUrl", null=True)
    webhook_secret = StringField(db_field="webhookSecret", null=True)

    meta = {
        "collection": "api_keys",
        # Made by apikeys.services on create. MongoEngine would try on the first request, database
        # down or not.
        "auto_create_index": False,
    }


def keys_collection() -> Collection:
    """The lookup reads one raw document rather than building a MongoEngine one."""
    return ApiKey._get_collection()
