"""Idempotency-Key on todo creates: a retry gets the first outcome, never a 409 for its own
todos; the key is the caller's alone and never appears in an answer."""

import requests

from tests.support.processes import AppServer

KEY = {"Idempotency-Key": "3f1c-retry-me"}


def post(app: AppServer, title: str, headers: dict[str, str]) -> requests.Response:
    return requests.post(app.url("/todo"), json={"todo": {"title": title}}, headers=headers)


def titles(app: AppServer) -> list[str]:
    return [t["title"] for t in requests.get(app.url("/todos")).json()["data"]]


def test_a_retried_create_gets_the_first_answer(app: AppServer):
    first = post(app, "pay rent", KEY)
    again = post(app, "pay rent", KEY)
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()  # the same todo: id, timestamps and all
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert set(again.json()["data"]) == {"id", "title", "description", "createdAt", "updatedAt"}
    assert titles(app) == ["pay rent"]


def test_without_a_key_a_duplicate_title_is_still_a_409(app: AppServer):
    assert post(app, "water plants", KEY).status_code == 201
    assert post(app, "water plants", {}).status_code == 409


def test_another_callers_equal_key_is_not_theirs(app: AppServer):
    assert post(app, "mine", KEY).status_code == 201
    other = post(app, "mine", {**KEY, "Authorization": "Bearer someone-else"})
    assert other.status_code == 409  # not a replay of another caller's todo
    assert "Idempotent-Replayed" not in other.headers


def test_a_key_reused_for_other_todos_is_a_409_and_creates_nothing(app: AppServer):
    assert post(app, "first use", KEY).status_code == 201
    reused = post(app, "second use", KEY)
    assert reused.status_code == 409
    assert "already used for a different request" in reused.json()["error"]["message"]
    assert titles(app) == ["first use"]


def test_a_retried_batch_gets_the_first_answer_in_order(app: AppServer):
    body = {"todos": [{"title": f"step {i}"} for i in (3, 1, 2)]}
    first = requests.patch(app.url("/todos"), json=body, headers=KEY)
    again = requests.patch(app.url("/todos"), json=body, headers=KEY)
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert [t["title"] for t in again.json()["data"]] == ["step 3", "step 1", "step 2"]


def test_a_malformed_key_is_a_400_naming_the_header(app: AppServer):
    response = post(app, "x", {"Idempotency-Key": "has spaces in it"})
    assert response.status_code == 400
    assert response.json()["error"]["details"] == [
        {"field": "Idempotency-Key", "message": "must be 1 to 255 visible ASCII characters"}
    ]
