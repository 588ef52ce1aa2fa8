"""With the database stopped the API answers 503 in the envelope, and recovers by itself: the
routes' behaviour, served in this process (todos_here). A killed database under gunicorn:
tests/todos/test_database_faults.py."""

import time

import pytest
import requests
from django.test import override_settings

from scripts.embedded_mongo import EmbeddedMongo
from tests.support.in_process import todos_here
from tests.support.processes import free_port


@pytest.fixture
def own_stack(tmp_path):
    """A database of this test's own, so stopping it disturbs no other test, and the app
    served here on it with MONGODB_TIMEOUT_MS 1 s."""
    mongo = EmbeddedMongo(tmp_path / "mongo", port=free_port()).start()
    try:
        with override_settings(MONGODB_TIMEOUT_MS=1000), todos_here(mongo.uri()) as app:
            yield mongo, app
    finally:
        mongo.stop()


def test_503_while_the_database_is_down_then_recovery(own_stack):
    mongo, app = own_stack
    created = requests.post(app.url("/todo"), json={"todo": {"title": "before"}}, timeout=10)
    assert created.status_code == 201

    mongo.stop()
    for method, path, body in [
        ("GET", "/todos", None),
        ("POST", "/todo", {"todo": {"title": "during"}}),
        ("GET", f"/todo/{created.json()['data']['id']}", None),
    ]:
        started = time.monotonic()
        response = requests.request(method, app.url(path), json=body, timeout=30)
        assert response.status_code == 503
        assert response.json() == {
            "data": None,
            "error": {"message": "The database is unreachable; try again shortly"},
        }
        assert "Traceback" not in response.text
        assert response.headers["Retry-After"]
        # MONGODB_TIMEOUT_MS (1 s here) and no more: not the request's whole budget (5 s)
        assert time.monotonic() - started < 2.5
    assert requests.get(app.url("/health"), timeout=5).status_code == 200

    mongo.start()
    deadline = time.monotonic() + 30
    while (response := requests.get(app.url("/todos"), timeout=10)).status_code != 200:
        assert time.monotonic() < deadline, response.text
        time.sleep(0.5)
    assert [t["title"] for t in response.json()["data"]] == ["before"]
