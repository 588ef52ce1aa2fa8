"""Every answer is {data, error}, every todo has exactly five keys, every response a version."""

import re
import tomllib
from pathlib import Path

FIVE_KEYS = {"id", "title", "description", "createdAt", "updatedAt"}
VERSION = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"][
    "version"
]


def assert_todo(todo: dict) -> None:
    assert set(todo) == FIVE_KEYS
    assert re.fullmatch(r"[0-9a-f]{24}", todo["id"])


def test_root_reports_the_project_version_in_body_and_header(app, http):
    response = http.get(app.url("/"))
    assert response.status_code == 200
    assert response.json() == {"data": {"version": VERSION}, "error": None}
    assert response.headers["X-App-Version"] == VERSION


def test_every_operation_returns_five_key_todos_in_the_envelope(app, http, create):
    created = create("first", "about it")
    assert_todo(created)
    assert created["description"] == "about it"

    got = http.get(app.url(f"/todo/{created['id']}"))
    assert got.status_code == 200 and set(got.json()) == {"data", "error"}
    assert got.json()["error"] is None
    assert got.json()["data"] == created

    updated = http.put(app.url(f"/todo/{created['id']}"), json={"todo": {"title": "renamed"}})
    assert updated.status_code == 202
    assert_todo(updated.json()["data"])

    batch = http.patch(app.url("/todos"), json={"todos": [{"title": "b1"}, {"title": "b2"}]})
    assert batch.status_code == 201
    for todo in batch.json()["data"]:
        assert_todo(todo)

    listed = http.get(app.url("/todos"))
    assert listed.status_code == 200
    assert [t["title"] for t in listed.json()["data"]] == ["renamed", "b1", "b2"]
    for todo in listed.json()["data"]:
        assert_todo(todo)

    deleted = http.delete(app.url(f"/todo/{created['id']}"))
    assert deleted.status_code == 202
    assert deleted.json() == {"data": updated.json()["data"], "error": None}

    cleared = http.delete(app.url("/todos"))
    assert cleared.status_code == 202
    assert cleared.json() == {"data": {"deletedCount": 2}, "error": None}
    assert http.get(app.url("/todos")).json() == {"data": [], "error": None}


def test_error_answers_use_the_envelope_and_carry_the_version(app, http):
    for response in (
        http.get(app.url("/todo/" + "0" * 24)),
        http.post(app.url("/todo"), json={"todo": {}}),
        http.get(app.url("/todos/nowhere")),
        http.post(app.url("/todos")),
    ):
        assert set(response.json()) == {"data", "error"}
        assert response.json()["data"] is None
        assert response.json()["error"]
        assert response.headers["X-App-Version"] == VERSION


def test_native_id_and_version_key_never_leak(app, http, create):
    create("x")
    body = http.get(app.url("/todos")).text
    assert "_id" not in body and "__v" not in body and "pending" not in body
