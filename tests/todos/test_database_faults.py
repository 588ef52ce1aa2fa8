"""A frozen (SIGSTOP), then killed database process under gunicorn: every todo request gives
up within its bound, the answer says what is known about a write, and /health and the image
routes keep answering while todo requests pile up. A create whose answer the client lost is
the routes' behaviour: served in this process (todos_here)."""

import contextlib
import http.client
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit
from uuid import uuid4

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from scripts.embedded_mongo import EmbeddedMongo
from tests.support.in_process import todos_here
from tests.support.processes import AppServer, free_port
from todos.errors import DATABASE_UNREACHABLE as UNREACHABLE
from todos.errors import UNCONFIRMED

TIMEOUT_MS = 400
BOUND = 5 * TIMEOUT_MS / 1000  # docs/configuration.md: a hung database, 5x MONGODB_TIMEOUT_MS
SLACK = 1.5


@pytest.fixture
def empty_todos() -> None:
    """The package's emptying of the session's app (tests/todos/conftest.py), not wanted here:
    these tests bring databases of their own, and the session's app would start for nothing."""


@pytest.fixture
def stack(tmp_path) -> Iterator[tuple[EmbeddedMongo, AppServer]]:
    mongo = EmbeddedMongo(tmp_path / "mongo", port=free_port()).start()
    env = {"MONGODB_URI": mongo.uri(), "MONGODB_TIMEOUT_MS": str(TIMEOUT_MS)}
    app = AppServer(env, tmp_path / "app.log").start()
    assert requests.post(app.url("/todo"), json={"todo": {"title": "warm"}}).status_code == 201
    yield mongo, app
    with contextlib.suppress(ProcessLookupError):  # a test may have stopped it for good
        os.kill(mongo.process.pid, signal.SIGCONT)
    app.stop()
    mongo.stop()


def timed(method: str, url: str, **kwargs) -> tuple[requests.Response, float]:
    started = time.monotonic()
    response = requests.request(method, url, timeout=60, **kwargs)
    return response, time.monotonic() - started


def test_a_frozen_then_killed_database_bounds_every_todo_request_and_tells_a_sent_write(
    stack,
):
    """Frozen: the bounds, /health spared, a sent write unconfirmed; then thawed and
    killed: unreachable, a write never sent (one gunicorn and database for both)."""
    mongo, app = stack
    os.kill(mongo.process.pid, signal.SIGSTOP)
    answers: list[tuple[requests.Response, float]] = []

    def batch(n: int) -> None:
        body = {"todos": [{"title": f"batch {n} item {i}"} for i in range(3)]}
        answers.append(timed("PATCH", app.url("/todos"), json=body))

    writers = [threading.Thread(target=batch, args=(n,)) for n in range(16)]
    for writer in writers:
        writer.start()
    time.sleep(0.3)  # the writers hold their threads now
    health = [timed("GET", app.url("/health")) for _ in range(5)]
    status = timed("GET", app.url("/model/status"))
    for writer in writers:
        writer.join()

    assert all(r.status_code == 200 and seconds < 1.0 for r, seconds in health), health
    assert status[0].status_code == 200 and status[1] < 1.0
    assert len(answers) == 16
    for response, seconds in answers:
        assert response.status_code == 503, response.text
        assert seconds < BOUND + SLACK
        assert response.headers["Retry-After"]
    messages = {r.json()["error"]["message"] for r, _ in answers}
    assert UNCONFIRMED in messages  # the writes that reached the database
    busy = "Too many todo requests are waiting for the database; try again shortly"
    assert messages <= {UNCONFIRMED, UNREACHABLE} | {busy}
    # docs/metrics.md: each such 503 is counted, by why (the scrape parsed as Prometheus does).
    refused = {
        sample.labels["reason"]: sample.value
        for family in text_string_to_metric_families(requests.get(app.url("/metrics")).text)
        for sample in family.samples
        if sample.name == "todos_requests_refused_database_total"
    }
    told_busy = sum(r.json()["error"]["message"] == busy for r, _ in answers)
    assert refused.get("busy", 0) == told_busy
    assert refused.get("unreachable", 0) == 16 - told_busy
    assert_a_write_sent_is_unconfirmed_and_a_read_unreachable(app)
    os.kill(mongo.process.pid, signal.SIGCONT)
    a_killed_database_is_unreachable_and_a_write_was_never_sent(mongo, app)


def assert_a_write_sent_is_unconfirmed_and_a_read_unreachable(app: AppServer) -> None:
    """One write sent to the frozen database, alone, and one read."""
    response, seconds = timed("POST", app.url("/todo"), json={"todo": {"title": "in doubt"}})
    assert response.status_code == 503 and seconds < BOUND + SLACK
    assert response.json()["error"]["message"] == UNCONFIRMED  # not "try again shortly"
    read, seconds = timed("GET", app.url("/todos"))
    assert read.status_code == 503 and seconds < BOUND + SLACK
    assert read.json()["error"]["message"] == UNREACHABLE  # a read can simply be retried


def a_killed_database_is_unreachable_and_a_write_was_never_sent(
    mongo: EmbeddedMongo, app: AppServer
) -> None:
    mongo.stop()
    response, seconds = timed("POST", app.url("/todo"), json={"todo": {"title": "never sent"}})
    assert response.status_code == 503 and seconds < BOUND + SLACK
    assert response.json()["error"]["message"] == UNREACHABLE


def test_a_create_whose_answer_was_lost_is_found_by_its_key(mongo: EmbeddedMongo):
    """The client sends a create and loses the answer (it hangs up before reading it, as
    after a timeout); the todo is saved all the same. Its retry with the same key gets
    the first outcome, where a plain retry meets its own todo as a 409."""
    with todos_here(mongo.uri(f"lost-{uuid4().hex[:8]}")) as app:
        a_create_whose_answer_was_lost_is_found_by_its_key(app.base_url)


def a_create_whose_answer_was_lost_is_found_by_its_key(base_url: str) -> None:
    body = json.dumps({"todo": {"title": "answer lost"}})
    connection = http.client.HTTPConnection("127.0.0.1", urlsplit(base_url).port, timeout=10)
    connection.request(
        "POST", "/todo", body=body,
        headers={"Content-Type": "application/json", "Idempotency-Key": "lost-answer"},
    )  # fmt: skip
    connection.close()  # hung up without reading the answer
    deadline = time.monotonic() + 10
    while not (listed := requests.get(base_url + "/todos", timeout=10).json()["data"]) or all(
        t["title"] != "answer lost" for t in listed
    ):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    saved = next(t for t in listed if t["title"] == "answer lost")
    retry = requests.post(
        base_url + "/todo", data=body, timeout=10,
        headers={"Content-Type": "application/json", "Idempotency-Key": "lost-answer"},
    )  # fmt: skip
    assert retry.status_code == 201 and retry.headers["Idempotent-Replayed"] == "true"
    assert retry.json()["data"] == saved
    plain = requests.post(base_url + "/todo", data=body, timeout=10,
                          headers={"Content-Type": "application/json"})  # fmt: skip
    assert plain.status_code == 409
