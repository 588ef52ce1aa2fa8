"""Bad input is a 400 in the envelope naming each field and rule, and writes nothing."""

import pytest


def fields(response) -> dict[str, str]:
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["data"] is None
    details = body["error"]["details"]
    for detail in details:
        assert detail["field"] in body["error"]["message"]
    return {d["field"]: d["message"] for d in details}


def stored_titles(app, http) -> list[str]:
    return [t["title"] for t in http.get(app.url("/todos")).json()["data"]]


@pytest.mark.parametrize(
    ("todo", "field", "rule"),
    [
        ({}, "todo.title", "required"),
        ({"title": ""}, "todo.title", "at least 1 character"),
        ({"title": "   \t"}, "todo.title", "visible character"),
        ({"title": "\u00a0"}, "todo.title", "visible character"),  # NBSP
        ({"title": "\u200b\u200c"}, "todo.title", "visible character"),  # zero-width
        ({"title": "\u0301"}, "todo.title", "visible character"),  # a combining mark alone
        ({"title": "x" * 41}, "todo.title", "at most 40 characters"),
        ({"title": 12}, "todo.title", "valid string"),
        ({"title": None}, "todo.title", "valid string"),
        ({"title": "ok", "description": "d" * 1001}, "todo.description", "at most 1000"),
        ({"title": "ok", "description": 5}, "todo.description", "valid string"),
        ({"title": "ok", "done": True}, "todo.done", "not permitted"),
    ],
)
def test_create_rejects_each_rule_by_name(app, http, todo, field, rule):
    problems = fields(http.post(app.url("/todo"), json={"todo": todo}))
    assert rule in problems[field]
    assert stored_titles(app, http) == []


def test_every_failing_field_is_named_at_once(app, http):
    problems = fields(
        http.post(app.url("/todo"), json={"todo": {"title": "", "description": 1, "extra": 2}})
    )
    assert set(problems) == {"todo.title", "todo.description", "todo.extra"}


def test_lengths_count_characters_not_bytes(app, http, create):
    create("é" * 40)  # 80 bytes in UTF-8
    create("🙂" * 40)  # 160 bytes
    problems = fields(http.post(app.url("/todo"), json={"todo": {"title": "🙂" * 41}}))
    assert "at most 40" in problems["todo.title"]
    create("t", "ü" * 1000)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"not json", "body"),
        (b"", "body"),
        (b'{"title": "no wrapper"}', "todo"),
        (b'{"todo": "a string"}', "todo"),
        (b"[1, 2]", "body"),
    ],
)
def test_malformed_bodies_are_validation_errors(app, http, body, field):
    response = http.post(app.url("/todo"), data=body, headers={"Content-Type": "application/json"})
    problems = fields(response)
    assert any(name == field or name.startswith(field + ".") for name in problems), problems


def test_update_validates_and_leaves_the_todo_unchanged(app, http, create):
    todo = create("keep me", "desc")
    problems = fields(http.put(app.url(f"/todo/{todo['id']}"), json={"todo": {"title": "y" * 41}}))
    assert "todo.title" in problems
    assert http.get(app.url(f"/todo/{todo['id']}")).json()["data"] == todo


def test_batch_with_one_bad_item_inserts_nothing(app, http):
    todos = [{"title": "good"}, {"title": ""}, {"title": "also good", "description": 3}]
    problems = fields(http.patch(app.url("/todos"), json={"todos": todos}))
    assert set(problems) == {"todos.1.title", "todos.2.description"}
    assert stored_titles(app, http) == []


@pytest.mark.parametrize(
    ("todos", "rule"),
    [([], "at least 1"), ([{"title": f"t{i}"} for i in range(1001)], "at most 1000")],
)
def test_batch_size_bounds(app, http, todos, rule):
    problems = fields(http.patch(app.url("/todos"), json={"todos": todos}))
    assert rule in problems["todos"]


def test_batch_of_exactly_1000_is_accepted(app, http):
    todos = [{"title": f"item {i}"} for i in range(1000)]
    response = http.patch(app.url("/todos"), json={"todos": todos})
    assert response.status_code == 201
    assert [t["title"] for t in response.json()["data"]] == [t["title"] for t in todos]


def test_the_largest_valid_batch_fits_the_body_limit(app, http):
    todos = [{"title": f"{i:04d}" + "é" * 36, "description": "ü" * 1000} for i in range(1000)]
    response = http.patch(app.url("/todos"), json={"todos": todos})  # ~12 MB, JSON-escaped
    assert response.status_code == 201, response.text[:300]
    assert len(response.json()["data"]) == 1000


def test_a_body_over_the_limit_is_413_in_the_envelope(app, http):
    response = http.post(
        app.url("/todo"),
        data=b'{"todo": {"title": "' + b"x" * (17 * 1024 * 1024) + b'"}}',
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 413
    assert response.json() == {"data": None, "error": {"message": "The request body is too large"}}


def test_a_disallowed_host_is_answered_in_the_envelope(app, http):
    response = http.get(app.url("/todos"), headers={"Host": "evil.example"})
    assert response.status_code == 400
    assert response.json() == {"data": None, "error": {"message": "Bad Request"}}
