"""Reads of todos, as the raw stored documents (todos.schemas.TodoOut shapes them).

Only committed todos are ever visible (see todos.documents). Reads go straight to the pymongo
collection: a MongoEngine document per todo cost more than the database's own work.
"""

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
    """A malformed id names no record, so it is a 404 like any other unknown id."""
    if not todo_id.strip():
        raise IdRequired()
    try:
        return ObjectId(todo_id)
    except (InvalidId, TypeError):
        raise TodoNotFound() from None


def is_committed(document: Document) -> bool:
    return document.get("pendingBatch") is None


def order_key(document: Document) -> tuple[datetime, bytes]:
    """The list's order in Python: ObjectIds compare as their 12 bytes, as MongoDB compares them."""
    return document["createdAt"], document["_id"].binary


def todo_get(*, todo_id: str) -> Document:
    # Looked up by _id alone, the pending check done here: the same answer, and an _id
    # lookup is the cheapest read a server has (on the embedded one, half the time).
    document = todos_collection().find_one({"_id": object_id(todo_id)})
    if document is None or not is_committed(document):
        raise TodoNotFound()
    return document


def todo_list() -> list[Document]:
    """Every committed todo, ordered by createdAt then id.

    The whole collection is read either way, so it is filtered and sorted here, in C, rather
    than by the server: the same result, and on the embedded server a plain read of 100 todos
    costs 1.0 ms where the filtered, sorted one costs 2.6 ms. A real MongoDB would sort through
    the index; this saves it that work too. The cost grows with the collection (docs/todo-api.md:
    "the unbounded list"); `todo_page` is the bounded read.
    """
    documents = [document for document in todos_collection().find() if is_committed(document)]
    documents.sort(key=order_key)
    return documents


def todo_first_page(*, limit: int) -> tuple[list[Document], Cursor | None]:
    """`GET /todos` without `limit`: every todo while there are at most `limit` (the
    collection's size from the server's metadata, one cheap call), read whole and sorted here
    as todo_list does; past it the first `limit` through the index, and the next page's
    cursor, so a large collection is never read and answered at once."""
    if todos_collection().estimated_document_count() <= limit:
        documents = todo_list()
        if len(documents) <= limit:  # a batch added since the count goes by the index
            return documents, None
    return todo_page(limit=limit, after=None)


def todo_page(*, limit: int, after: Cursor | None) -> tuple[list[Document], Cursor | None]:
    """At most `limit` committed todos after the cursor, in list order, and the cursor of the
    next page (None on the last one). The server filters, sorts and stops early, through the
    (createdAt, _id) index; one todo more than asked says whether a next page exists."""
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
