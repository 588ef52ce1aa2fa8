"""A pending todo (a batch still being written on a standalone server) is invisible to every
read and untouched by every write until its batch commits (see todos.documents)."""

import uuid
from datetime import timedelta

import pytest

from core.timestamps import utc_now
from todos import selectors, services
from todos.documents import todos_collection
from todos.errors import TodoNotFound


@pytest.fixture
def pending(mongo, connect_here) -> dict:
    """One committed todo and one pending todo, on a database of this test's own."""
    name = f"pending_{uuid.uuid4().hex[:8]}"
    connect_here(mongo.uri(name))
    now = utc_now()
    services.todo_create(title="committed", description=None)
    document = {
        "title": "pending",
        "description": None,
        "createdAt": now - timedelta(seconds=1),  # sorts first if it were visible
        "updatedAt": None,
        "pendingBatch": "b" * 32,
        "pendingExpiresAt": now + timedelta(minutes=5),
    }
    todos_collection().insert_one(document)
    yield document
    todos_collection().database.client.drop_database(name)


def titles(documents) -> list[str]:
    return [document["title"] for document in documents]


def test_reads_do_not_see_it(pending):
    todo_id = str(pending["_id"])
    with pytest.raises(TodoNotFound):
        selectors.todo_get(todo_id=todo_id)
    assert titles(selectors.todo_list()) == ["committed"]
    page, following = selectors.todo_page(limit=1, after=None)
    assert titles(page) == ["committed"] and following is None


def test_writes_do_not_touch_it(pending):
    todo_id = str(pending["_id"])
    with pytest.raises(TodoNotFound):
        services.todo_update(todo_id=todo_id, title="changed", description=None)
    with pytest.raises(TodoNotFound):
        services.todo_delete(todo_id=todo_id)
    assert services.todos_delete_all() == 1
    stored = todos_collection().find_one({"_id": pending["_id"]})
    assert (stored["title"], stored["updatedAt"]) == ("pending", None)
