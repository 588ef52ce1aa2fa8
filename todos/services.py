"""Everything that changes todos. Routers call these; they raise todos.errors on refusal."""

import logging
import uuid
from collections import Counter
from datetime import timedelta

from mongoengine.errors import BulkWriteError, NotUniqueError
from pymongo.errors import BulkWriteError as PyMongoBulkWriteError
from pymongo.errors import DuplicateKeyError

from config.timestamps import utc_now
from todos.documents import Todo
from todos.errors import TitleTaken, TodoNotFound
from todos.indexes import ensure_todo_indexes
from todos.selectors import object_id
from todos.transactions import transactions_supported

log = logging.getLogger(__name__)

# How long a crashed batch may keep its titles reserved before the TTL index removes it.
PENDING_BATCH_TTL = timedelta(minutes=5)


def todo_create(*, title: str, description: str | None) -> Todo:
    ensure_todo_indexes()
    todo = Todo(title=title, description=description, created_at=utc_now(), updated_at=None)
    try:
        todo.save(force_insert=True)
    except NotUniqueError:
        raise TitleTaken(title) from None
    return todo


def todo_update(*, todo_id: str, title: str, description: str | None) -> Todo:
    ensure_todo_indexes()
    try:
        todo = (
            Todo.objects.committed()
            .filter(id=object_id(todo_id))
            .modify(
                new=True,
                set__title=title,
                set__description=description,
                set__updated_at=utc_now(),
            )
        )
    except NotUniqueError:
        raise TitleTaken(title) from None
    if todo is None:
        raise TodoNotFound()
    return todo


def todo_delete(*, todo_id: str) -> Todo:
    todo = Todo.objects.committed().filter(id=object_id(todo_id)).modify(remove=True)
    if todo is None:
        raise TodoNotFound()
    return todo


def todos_delete_all() -> int:
    return Todo.objects.committed().delete()


def todos_insert_batch(*, items: list[tuple[str, str | None]]) -> list[Todo]:
    """Inserts all the todos or none of them, in request order."""
    repeated = [title for title, count in Counter(t for t, _ in items).items() if count > 1]
    if repeated:
        raise TitleTaken(repeated[0])
    ensure_todo_indexes()
    now = utc_now()
    todos = [
        Todo(title=title, description=description, created_at=now, updated_at=None)
        for title, description in items
    ]
    titles = [title for title, _ in items]
    if transactions_supported():
        _insert_in_transaction(todos, titles)
    else:
        _insert_pending_then_commit(todos, titles, now)
    return todos


def _insert_in_transaction(todos: list[Todo], titles: list[str]) -> None:
    """Replica sets: one transaction, invisible to readers until it commits."""
    documents = [todo.to_mongo().to_dict() for todo in todos]
    collection = Todo._get_collection()
    try:
        with collection.database.client.start_session() as session:
            session.with_transaction(
                lambda s: collection.insert_many(documents, ordered=True, session=s)
            )
    except PyMongoBulkWriteError as error:
        if not _is_duplicate(error):
            raise
        raise TitleTaken(_taken_title(titles)) from None
    except DuplicateKeyError:
        raise TitleTaken(_taken_title(titles)) from None
    for todo, document in zip(todos, documents, strict=True):
        todo.id = document["_id"]


def _insert_pending_then_commit(todos: list[Todo], titles: list[str], now) -> None:
    """Standalone servers have no transactions: the todos go in pending (invisible, see
    todos.documents) and are then committed together; on a conflict they are removed."""
    batch = uuid.uuid4().hex
    for todo in todos:
        todo.pending_batch = batch
        todo.pending_expires_at = now + PENDING_BATCH_TTL
    try:
        Todo.objects.insert(todos, load_bulk=False)
    except (NotUniqueError, BulkWriteError) as error:
        _discard_batch(batch)
        if isinstance(error, BulkWriteError) and "E11000" not in str(error):
            raise
        raise TitleTaken(_taken_title(titles)) from None
    except BaseException:
        _discard_batch(batch)
        raise
    Todo.objects.filter(pending_batch=batch).update(
        unset__pending_batch=True, unset__pending_expires_at=True
    )
    for todo in todos:
        todo.pending_batch = todo.pending_expires_at = None


def _is_duplicate(error: PyMongoBulkWriteError) -> bool:
    return any(e.get("code") == 11000 for e in error.details.get("writeErrors", []))


def _discard_batch(batch: str) -> None:
    try:
        Todo.objects.filter(pending_batch=batch).delete()
    except Exception:  # the TTL index removes the leftovers if the database is gone
        log.exception("could not discard pending batch %s", batch)


def _taken_title(titles: list[str]) -> str | None:
    """Names a title that blocked the batch, for the error message."""
    taken = Todo.objects.committed().filter(title__in=titles).only("title").first()
    return taken.title if taken else None
