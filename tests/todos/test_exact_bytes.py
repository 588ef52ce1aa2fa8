"""Every todo answer, byte for byte, as the service wrote it before its serialisation changed.

The expected bodies below were captured from the hand-built-dict version of the service
(`Todo.to_output`), so any change in how answers are produced (schemas, raw documents, another
JSON encoder) must keep key order, spacing, escaping and the `...15.728Z` timestamps exactly.
In process (Django's test client, the whole middleware stack), on a real wire-protocol server,
with fixed todos and a fixed clock.
"""

import re
from collections.abc import Iterator
from datetime import UTC, datetime

import mongoengine
import pytest
from bson import ObjectId
from django.test import Client

from scripts.embedded_mongo import EmbeddedMongo

DATABASE = "todos_exact_bytes"
CLOCK = datetime(2026, 11, 22, 7, 46, 15, 728000, tzinfo=UTC)
JSON = "application/json; charset=utf-8"

FIRST = ObjectId("6b02ab5220f488b9b36cc1cd")
SECOND = ObjectId("6b02ab5220f488b9b36cc1ce")
THIRD = ObjectId("6b02ab5220f488b9b36cc1cf")
FIXED = [
    {
        "_id": SECOND,
        "title": "buy milk",
        "description": None,
        "createdAt": datetime(2026, 11, 22, 7, 46, 15, 728000, tzinfo=UTC),
        "updatedAt": None,
    },
    {
        "_id": FIRST,
        "title": 'café "au lait" ☕',
        "description": "line one\nline two\t🙂 </script>",
        "createdAt": datetime(2026, 11, 22, 7, 46, 15, 728000, tzinfo=UTC),
        "updatedAt": datetime(2026, 11, 23, 0, 0, 0, 5000, tzinfo=UTC),
    },
    {
        "_id": THIRD,
        "title": "x",
        "description": "",
        "createdAt": datetime(2025, 1, 2, 3, 4, 5, 0, tzinfo=UTC),
        "updatedAt": datetime(2025, 1, 2, 3, 4, 6, 999000, tzinfo=UTC),
    },
]

MILK = (
    '{"id": "6b02ab5220f488b9b36cc1ce", "title": "buy milk", "description": null, '
    '"createdAt": "2026-11-22T07:46:15.728Z", "updatedAt": null}'
)
CAFE = (
    '{"id": "6b02ab5220f488b9b36cc1cd", "title": "caf\\u00e9 \\"au lait\\" \\u2615", '
    '"description": "line one\\nline two\\t\\ud83d\\ude42 </script>", '
    '"createdAt": "2026-11-22T07:46:15.728Z", "updatedAt": "2026-11-23T00:00:00.005Z"}'
)
X = (
    '{"id": "6b02ab5220f488b9b36cc1cf", "title": "x", "description": "", '
    '"createdAt": "2025-01-02T03:04:05.000Z", "updatedAt": "2025-01-02T03:04:06.999Z"}'
)


@pytest.fixture
def client(mongo: EmbeddedMongo, connect_here, monkeypatch) -> Iterator[Client]:
    """This process's MongoEngine on a database of its own, holding exactly the fixed todos."""
    monkeypatch.setattr("todos.services.utc_now", lambda: CLOCK)
    connect_here(mongo.uri(DATABASE))
    collection = mongoengine.get_db()["todos"]
    collection.delete_many({})
    collection.insert_many([dict(todo) for todo in FIXED])
    yield Client()
    mongoengine.get_connection().drop_database(DATABASE)


def body(response) -> str:
    return response.content.decode("ascii")


def test_get_one(client):
    response = client.get(f"/todo/{FIRST}")
    assert (response.status_code, response["Content-Type"]) == (200, JSON)
    assert body(response) == '{"data": ' + CAFE + ', "error": null}'


def test_list_orders_by_created_at_then_id(client):
    response = client.get("/todos")
    assert (response.status_code, response["Content-Type"]) == (200, JSON)
    assert body(response) == '{"data": [' + X + ", " + CAFE + ", " + MILK + '], "error": null}'


def test_update(client):
    response = client.put(
        f"/todo/{SECOND}",
        '{"todo": {"title": "buy oat milk", "description": "2 \\u00e9"}}',
        content_type="application/json",
    )
    assert (response.status_code, response["Content-Type"]) == (202, JSON)
    assert body(response) == (
        '{"data": {"id": "6b02ab5220f488b9b36cc1ce", "title": "buy oat milk", '
        '"description": "2 \\u00e9", "createdAt": "2026-11-22T07:46:15.728Z", '
        '"updatedAt": "2026-11-22T07:46:15.728Z"}, "error": null}'
    )


def test_delete_one(client):
    response = client.delete(f"/todo/{FIRST}")
    assert (response.status_code, response["Content-Type"]) == (202, JSON)
    assert body(response) == '{"data": ' + CAFE + ', "error": null}'


def test_create(client):
    response = client.post(
        "/todo", '{"todo": {"title": "new \\u00fc"}}', content_type="application/json"
    )
    assert (response.status_code, response["Content-Type"]) == (201, JSON)
    (todo_id,) = re.findall(r'"id": "([0-9a-f]{24})"', body(response))
    assert body(response) == (
        f'{{"data": {{"id": "{todo_id}", "title": "new \\u00fc", "description": null, '
        '"createdAt": "2026-11-22T07:46:15.728Z", "updatedAt": null}, "error": null}'
    )


def test_batch(client):
    response = client.patch(
        "/todos",
        '{"todos": [{"title": "b1", "description": "d"}, {"title": "b2"}]}',
        content_type="application/json",
    )
    assert (response.status_code, response["Content-Type"]) == (201, JSON)
    first, second = re.findall(r'"id": "([0-9a-f]{24})"', body(response))
    assert body(response) == (
        f'{{"data": [{{"id": "{first}", "title": "b1", "description": "d", '
        '"createdAt": "2026-11-22T07:46:15.728Z", "updatedAt": null}, '
        f'{{"id": "{second}", "title": "b2", "description": null, '
        '"createdAt": "2026-11-22T07:46:15.728Z", "updatedAt": null}], "error": null}'
    )


def test_delete_all(client):
    response = client.delete("/todos")
    assert (response.status_code, response["Content-Type"]) == (202, JSON)
    assert body(response) == '{"data": {"deletedCount": 3}, "error": null}'
    assert body(client.get("/todos")) == '{"data": [], "error": null}'


def test_version(client):
    assert body(client.get("/")) == '{"data": {"version": "0.1.0"}, "error": null}'


@pytest.mark.parametrize(
    ("method", "path", "payload", "status", "expected"),
    [
        ("get", "/todo/" + "0" * 24, None, 404, '{"data": null, "error": {"message": '
            '"Todo not found"}}'),
        ("get", "/todo/%20", None, 400, '{"data": null, "error": {"message": "id is required"}}'),
        ("get", "/todos/x", None, 404, '{"data": null, "error": "Not Found"}'),
        ("get", "/todos?after=" + "A" * 27, None, 400, '{"data": null, "error": {"message": '
            '"Invalid request: limit: is required with after: send the page size beside the '
            'cursor (limit=1 to 1000), as the Link header\'s address does", "details": [{"field'
            '": "limit", "message": "is required with after: send the page size beside the '
            'cursor (limit=1 to 1000), as the Link header\'s address does"}]}}'),
        (
            "post", "/todo", '{"todo": {"title": "buy milk"}}', 409,
            '{"data": null, "error": {"message": "title must be unique: \'buy milk\' is already '
            'taken"}}',
        ),
        (
            "patch", "/todos", '{"todos": [{"title": "a"}, {"title": "dup"}, {"title": "dup"}]}',
            409, '{"data": null, "error": {"message": "title must be unique: \'dup\' is '
            'duplicated within the batch: todos.1.title and todos.2.title"}}',
        ),
        (
            "post", "/todo", '{"todo": {"title": ""}}', 400,
            '{"data": null, "error": {"message": "Invalid request: todo.title: String should have '
            'at least 1 character", "details": [{"field": "todo.title", "message": "String should '
            'have at least 1 character"}]}}',
        ),
    ],
)  # fmt: skip
def test_errors(client, method, path, payload, status, expected):
    kwargs = {"content_type": "application/json"} if payload else {}
    response = getattr(client, method)(path, payload, **kwargs)
    assert response.status_code == status
    assert body(response) == expected
