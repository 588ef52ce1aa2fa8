"""Everything that changes todos. They raise todos.errors on refusal.

Each write is one pymongo command; the unique index makes a taken title fail the write itself."""

import logging
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

from pymongo import ReturnDocument
from pymongo.collection import Collection
from pymongo.errors import BulkWriteError, DuplicateKeyError

from core.timestamps import utc_now
from todos import idempotency
from todos.documents import todos_collection
from todos.errors import IdempotencyKeyReused, TitleDuplicated, TitleTaken, TodoNotFound
from todos.indexes import ensure_todo_indexes
from todos.selectors import COMMITTED, Document, object_id
from todos.transactions import transactions_supported

log = logging.getLogger(__name__)

# How long a crashed batch may reserve its titles before the TTL index removes it.
PENDING_BATCH_TTL = timedelta(minutes=5)


def new_document(title: str, description: str | None, now: datetime) -> Document:
    """pymongo adds `_id` on insert; keys in MongoEngine's order."""
    return {"title": title, "description": description, "createdAt": now, "updatedAt": None}


def todo_create(
    *, title: str, description: str | None, idempotency_key: str | None = None
) -> tuple[Document, bool]:
    """Also says whether it is the earlier outcome of the same Idempotency-Key."""

    def insert(collection: Collection, documents: list[Document], now: datetime) -> None:
        try:
            collection.insert_one(documents[0])  # one command: no transaction needed
        except DuplicateKeyError:
            raise TitleTaken(title) from None

    documents, replayed = _insert_once([(title, description)], idempotency_key, insert)
    return documents[0], replayed


def todo_update(*, todo_id: str, title: str, description: str | None) -> Document:
    ensure_todo_indexes()
    try:
        document = todos_collection().find_one_and_update(
            {"_id": object_id(todo_id), **COMMITTED},
            {"$set": {"title": title, "description": description, "updatedAt": utc_now()}},
            return_document=ReturnDocument.AFTER,
        )
    except DuplicateKeyError:
        raise TitleTaken(title) from None
    if document is None:
        raise TodoNotFound()
    return document


def todo_delete(*, todo_id: str) -> Document:
    document = todos_collection().find_one_and_delete({"_id": object_id(todo_id), **COMMITTED})
    if document is None:
        raise TodoNotFound()
    return document


def todos_delete_all() -> int:
    return todos_collection().delete_many(COMMITTED).deleted_count


def todos_insert_batch(
    *, items: list[tuple[str, str | None]], idempotency_key: str | None = None
) -> tuple[list[Document], bool]:
    """All the todos or none, in request order.

    The bool says they are the earlier outcome of the same Idempotency-Key."""
    titles = [title for title, _ in items]
    first_at: dict[str, int] = {}
    for index, title in enumerate(titles):
        if title in first_at:
            raise TitleDuplicated(title, first_at[title], index)
        first_at[title] = index

    def insert(collection: Collection, documents: list[Document], now: datetime) -> None:
        if transactions_supported():
            _insert_in_transaction(collection, documents, titles)
        else:
            _insert_pending_then_commit(collection, documents, titles, now)

    return _insert_once(items, idempotency_key, insert)


def _insert_once(
    items: list[tuple[str, str | None]],
    idempotency_key: str | None,
    insert: Callable[[Collection, list[Document], datetime], None],
) -> tuple[list[Document], bool]:
    """Skips the insert when a request with the same key already created them, and answers True."""
    ensure_todo_indexes()
    now = utc_now()
    collection = todos_collection()
    if idempotency_key and (earlier := _outcome(collection, idempotency_key, items, now)):
        return earlier, True
    documents = [new_document(title, description, now) for title, description in items]
    if idempotency_key:
        idempotency.stamp(documents, idempotency_key, now)
    try:
        insert(collection, documents, now)
    except TitleTaken:
        # The same key's twin may have inserted them since the lookup.
        if idempotency_key and (earlier := _outcome(collection, idempotency_key, items, now)):
            return earlier, True
        raise
    return documents, False


def _outcome(
    collection: Collection, key: str, items: list[tuple[str, str | None]], now: datetime
) -> list[Document] | None:
    """What an earlier request with this key created. The key reused for other todos is a 409."""
    query = {**idempotency.outcome_query(key, now), **COMMITTED}
    earlier = sorted(collection.find(query), key=lambda d: d["idempotencyIndex"])
    if not earlier:
        return None
    if [(d["title"], d["description"]) for d in earlier] != items:
        raise IdempotencyKeyReused()
    return earlier


def _insert_in_transaction(
    collection: Collection, documents: list[Document], titles: list[str]
) -> None:
    """Replica sets: invisible to readers until the transaction commits."""
    try:
        with collection.database.client.start_session() as session:
            session.with_transaction(
                lambda s: collection.insert_many(documents, ordered=True, session=s)
            )
    except BulkWriteError as error:
        if not _is_duplicate(error):
            raise
        raise TitleTaken(_taken_title(collection, titles)) from None
    except DuplicateKeyError:
        raise TitleTaken(_taken_title(collection, titles)) from None


def _insert_pending_then_commit(
    collection: Collection, documents: list[Document], titles: list[str], now: datetime
) -> None:
    """Standalone servers have no transactions: pending first, then committed together.

    On a conflict they are removed."""
    batch = uuid.uuid4().hex
    pending = {"pendingBatch": batch, "pendingExpiresAt": now + PENDING_BATCH_TTL}
    for document in documents:
        document.update(pending)
    try:
        collection.insert_many(documents, ordered=True)
    except BulkWriteError as error:
        _discard_batch(collection, batch)
        if not _is_duplicate(error):
            raise
        raise TitleTaken(_taken_title(collection, titles)) from None
    except BaseException:
        _discard_batch(collection, batch)
        raise
    collection.update_many(
        {"pendingBatch": batch}, {"$unset": {"pendingBatch": True, "pendingExpiresAt": True}}
    )
    for document in documents:
        del document["pendingBatch"], document["pendingExpiresAt"]


def _is_duplicate(error: BulkWriteError) -> bool:
    return any(e.get("code") == 11000 for e in error.details.get("writeErrors", []))


def _discard_batch(collection: Collection, batch: str) -> None:
    try:
        collection.delete_many({"pendingBatch": batch})
    except Exception:  # the TTL index removes the leftovers if the database is gone
        log.exception("could not discard pending batch %s", batch)


def _taken_title(collection: Collection, titles: list[str]) -> str | None:
    """For the error message."""
    taken = collection.find_one({"title": {"$in": titles}, **COMMITTED}, {"title": True})
    return taken["title"] if taken else None
