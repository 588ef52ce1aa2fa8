"""How a todo is stored.

On a server without transactions (a standalone mongod), a todo inserted by a batch stays
*pending* (it carries `pendingBatch`) until the whole batch is in; readers see only committed
todos. The unique index on `title` covers pending todos too, so a batch reserves its titles
while it runs. If the process dies mid-batch, the TTL index removes the leftovers at
`pendingExpiresAt`. (Replica sets use a transaction instead: see todos.services.)

`Todo` defines the stored fields and the indexes (todos.indexes makes them); reads and writes
handle the same documents raw, through `todos_collection()`.
"""

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
        # Created by todos.indexes, which retries after a failure; MongoEngine's own
        # auto-creation gives up for good if the first attempt finds the server down.
        "auto_create_index": False,
        "indexes": [
            {"fields": ["created_at", "id"]},
            {"fields": ["pending_expires_at"], "expireAfterSeconds": 0},
            {"fields": ["idempotency_key"], "sparse": True},
        ],
    }


_naive: tuple[Collection, Collection] | None = None


def todos_collection() -> Collection:
    """The todos' pymongo collection, on MongoEngine's connection (its settings, its pool).

    Reads and writes use raw documents through it: a MongoEngine document per todo cost more
    than the database's own work (17 us per todo read). Its datetimes decode naive, in UTC
    as BSON stores them: decoding them and writing them as text (todos.schemas) is then
    twice and four times as fast as with a tzinfo attached."""
    global _naive
    base = Todo._get_collection()  # a new one after MongoEngine reconnects
    if _naive is None or _naive[0] is not base:
        options = base.codec_options.with_options(tz_aware=False, tzinfo=None)
        _naive = (base, base.with_options(codec_options=options))
    return _naive[1]
