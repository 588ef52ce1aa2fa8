"""How an API key is stored: its name, its limits, and a salted hash of its secret, never the
secret itself (a copy of the database, a backup or a log of its queries opens nothing).

A secret reads `igk_<key id>_<random>`. The key id is public and indexed: a request's key is
found by it in one read, and its secret then checked against the salted hash in constant
time. The random part has 256 bits, so a fast hash (SHA-256) is enough: there is nothing to
guess by brute force, unlike a password.

A revoked key keeps its document (revokedAt set) and its name: the name is whose jobs and
images are whose, so it is never handed to someone else.
"""

from mongoengine import BooleanField, DateTimeField, Document, IntField, StringField
from pymongo.collection import Collection

NAME_MAX = 64
# What a key that is not an admin may call: "api", every route but the admin's own (pulling
# the model, /metrics, deleting every todo); "metrics", /metrics alone (a scraper's key).
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
    # Where the key's asynchronous jobs are told they ended, and the secret that signs those
    # webhooks: kept as it is (it must sign), made and shown only by `keys webhook-secret`.
    webhook_url = StringField(db_field="webhookUrl", null=True)
    webhook_secret = StringField(db_field="webhookSecret", null=True)

    meta = {
        "collection": "api_keys",
        # Made by apikeys.services when a key is created (the only writer that needs them);
        # MongoEngine's own creation would try on the first request, database down or not.
        "auto_create_index": False,
    }


def keys_collection() -> Collection:
    """The keys' pymongo collection on MongoEngine's connection: the per-request lookup reads
    one raw document rather than building a MongoEngine one."""
    return ApiKey._get_collection()
