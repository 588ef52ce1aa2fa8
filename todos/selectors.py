"""Reads of todos, as raw stored documents; only committed todos are visible.

Reads go straight to pymongo: a MongoEngine document per todo cost more than the read."""

from datetime import datetime
from typing import Any

from bson import ObjectId
from bson.errors import InvalidId
from pymongo import ASCENDING

from todos.cursors import Cursor
from todos.documents import todos_collection
from todos.errors import IdRequired, TodoNotFound

# The list's order, which the (createdAt, _id) index serves.
ORDER = [("createdAt", ASCENDING), ("_id", ASCENDING)]
COMMITTED: dict[str, Any] = {"pendingBatch": None}

Document = dict[str, Any]


def object_id(todo_id: str) -> ObjectId:
    """A malformed id names no record, so it is a 404 like any unknown id."""
    if not todo_id.strip():
        raise IdRequired()
    try:
        return ObjectId(todo_id)
    except (InvalidId, TypeError):
        raise TodoNotFound() from None


def is_committed(document: Document) -> bool:
    return document.get("pendingBatch") is None


def order_key(document: Document) -> tuple[datetime, bytes]:
    """ObjectIds compare as their 12 bytes, as MongoDB compares them."""
    return document["createdAt"], document["_id"].binary


def todo_get(*, todo_id: str) -> Document:
    # Looked up by _id alone, the pending check done here: the cheapest read a server has.
    document = todos_collection().find_one({"_id": object_id(todo_id)})
    if document is None or not is_committed(document):
        raise TodoNotFound()
    return document


def todo_list() -> list[Document]:
    """Every committed todo, by createdAt then id, filtered and sorted here: faster than the
    server."""
    documents = [document for document in todos_collection().find() if is_committed(document)]
    documents.sort(key=order_key)
    return documents


def todo_first_page(*, limit: int) -> tuple[list[Document], Cursor | None]:
    """`GET /todos` without `limit`: everything while the collection is at most `limit`.

    Past it, the first page and a cursor. So a large collection is never read at once."""
    if todos_collection().estimated_document_count() <= limit:
        documents = todo_list()
        if len(documents) <= limit:  # a batch added since the count goes by the index
            return documents, None
    return todo_page(limit=limit, after=None)


def todo_page(*, limit: int, after: Cursor | None) -> tuple[list[Document], Cursor | None]:
    """At most `limit` todos after the cursor, and the next cursor (None on the last page).

    The server stops early through the index; one todo more says whether a page follows."""
    query: dict[str, Any] = dict(COMMITTED)
    if after is not None:
        query["$or"] = [
            {"createdAt": {"$gt": after.created_at}},
            {"createdAt": after.created_at, "_id": {"$gt": after.id}},
        ]
    documents = list(todos_collection().find(query).sort(ORDER).limit(limit + 1))
    if len(documents) <= limit:
        return documents, None
    return documents[:limit], Cursor.after(documents[limit - 1])
