"""Reads of todos: only committed todos are ever visible (see todos.documents)."""

from bson import ObjectId
from bson.errors import InvalidId

from todos.documents import Todo
from todos.errors import IdRequired, TodoNotFound


def object_id(todo_id: str) -> ObjectId:
    """A malformed id names no record, so it is a 404 like any other unknown id."""
    if not todo_id.strip():
        raise IdRequired()
    try:
        return ObjectId(todo_id)
    except (InvalidId, TypeError):
        raise TodoNotFound() from None


def todo_get(*, todo_id: str) -> Todo:
    todo = Todo.objects.committed().filter(id=object_id(todo_id)).first()
    if todo is None:
        raise TodoNotFound()
    return todo


def todo_list() -> list[Todo]:
    return list(Todo.objects.committed().order_by("created_at", "id"))
