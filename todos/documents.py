"""How a todo is stored.

On a server without transactions (a standalone mongod), a todo inserted by a batch stays
*pending* (it carries `pendingBatch`) until the whole batch is in; readers see only committed
todos. The unique index on `title` covers pending todos too, so a batch reserves its titles
while it runs. If the process dies mid-batch, the TTL index removes the leftovers at
`pendingExpiresAt`. (Replica sets use a transaction instead: see todos.services.)
"""

from mongoengine import DateTimeField, Document, QuerySet, StringField

from config.timestamps import iso_ms

TITLE_MAX = 40
DESCRIPTION_MAX = 1000


class TodoQuerySet(QuerySet):
    def committed(self) -> "TodoQuerySet":
        return self.filter(pending_batch=None)


class Todo(Document):
    title = StringField(required=True, max_length=TITLE_MAX, unique=True)
    description = StringField(max_length=DESCRIPTION_MAX, null=True)
    created_at = DateTimeField(db_field="createdAt", required=True)
    updated_at = DateTimeField(db_field="updatedAt", null=True)
    pending_batch = StringField(db_field="pendingBatch")
    pending_expires_at = DateTimeField(db_field="pendingExpiresAt")

    meta = {
        "collection": "todos",
        "queryset_class": TodoQuerySet,
        # Created by todos.indexes, which retries after a failure; MongoEngine's own
        # auto-creation gives up for good if the first attempt finds the server down.
        "auto_create_index": False,
        "indexes": [
            {"fields": ["created_at", "id"]},
            {"fields": ["pending_expires_at"], "expireAfterSeconds": 0},
        ],
    }

    def to_output(self) -> dict:
        """The five keys every todo answer has, and nothing else."""
        return {
            "id": str(self.id),
            "title": self.title,
            "description": self.description,
            "createdAt": iso_ms(self.created_at),
            "updatedAt": iso_ms(self.updated_at),
        }
