"""How a todo is stored.

Without transactions, a batch's todos stay pending, unseen, until all are in. The unique title
index covers them, so a batch reserves its titles. A TTL index removes a crashed batch's
todos."""

from mongoengine import DateTimeField, Document, IntField, StringField
from pymongo.collection import Collection

TITLE_MAX = 40
DESCRIPTION_MAX = 1000


class Todo(Document):
    title = StringField(required=True, max_length=TITLE_MAX, unique=True)
    description = StringField(max_length=DESCRIPTION_MAX, null=True)
    created_at = DateTimeField(db_field="createdAt", required=True)
    updated_at = DateTimeField(db_field="updatedAt", null=True)
    pending_batch = StringField(db_field="pendingBatch")
    pending_expires_at = DateTimeField(db_field="pendingExpiresAt")
    # The Idempotency-Key that created it (hashed with the credential; todos.idempotency).
    idempotency_key = StringField(db_field="idempotencyKey")
    idempotency_index = IntField(db_field="idempotencyIndex")
    idempotency_expires_at = DateTimeField(db_field="idempotencyExpiresAt")

    meta = {
        "collection": "todos",
        # Created by todos.indexes, which retries. MongoEngine's auto-creation gives up for good if
        # the server is down at first.
        "auto_create_index": False,
        "indexes": [
            {"fields": ["created_at", "id"]},
            {"fields": ["pending_expires_at"], "expireAfterSeconds": 0},
            {"fields": ["idempotency_key"], "sparse": True},
        ],
    }


_naive: tuple[Collection, Collection] | None = None


def todos_collection() -> Collection:
    """Raw documents: a MongoEngine document cost more than the read itself (17 us a todo)."""
    global _naive
    base = Todo._get_collection()  # a new one after MongoEngine reconnects
    if _naive is None or _naive[0] is not base:
        options = base.codec_options.with_options(tz_aware=False, tzinfo=None)
        _naive = (base, base.with_options(codec_options=options))
    return _naive[1]
