"""createdAt is set once, updatedAt on each update; the list is ordered by creation."""

import re
import time
from datetime import UTC, datetime

ISO_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def parse(stamp: str) -> datetime:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def test_create_sets_created_at_now_and_updated_at_null(create):
    before = datetime.now(UTC)
    todo = create("stamp")
    after = datetime.now(UTC)
    assert ISO_MS.fullmatch(todo["createdAt"])
    assert before.replace(microsecond=before.microsecond // 1000 * 1000) <= parse(todo["createdAt"])
    assert parse(todo["createdAt"]) <= after
    assert todo["updatedAt"] is None


def test_update_sets_updated_at_and_keeps_created_at(app, http, create):
    todo = create("before", "old")
    time.sleep(0.01)
    first = http.put(app.url(f"/todo/{todo['id']}"), json={"todo": {"title": "after"}}).json()
    assert first["data"]["createdAt"] == todo["createdAt"]
    assert ISO_MS.fullmatch(first["data"]["updatedAt"])
    assert parse(first["data"]["updatedAt"]) > parse(todo["createdAt"])
    assert first["data"]["description"] is None  # omitted on update means null

    time.sleep(0.01)
    second = http.put(
        app.url(f"/todo/{todo['id']}"), json={"todo": {"title": "again", "description": "d"}}
    ).json()
    assert parse(second["data"]["updatedAt"]) > parse(first["data"]["updatedAt"])
    assert http.get(app.url(f"/todo/{todo['id']}")).json()["data"] == second["data"]


def test_list_is_ordered_by_creation_then_id(app, http, create):
    create("one")
    batch = http.patch(
        app.url("/todos"), json={"todos": [{"title": "two"}, {"title": "three"}, {"title": "four"}]}
    ).json()["data"]
    assert [t["title"] for t in batch] == ["two", "three", "four"]
    create("five")
    listed = http.get(app.url("/todos")).json()["data"]
    assert [t["title"] for t in listed] == ["one", "two", "three", "four", "five"]
    keys = [(t["createdAt"], t["id"]) for t in listed]
    assert keys == sorted(keys)
