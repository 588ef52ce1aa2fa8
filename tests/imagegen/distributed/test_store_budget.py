"""A frozen job store (redis-server stopped with SIGSTOP), in process against a real one:
every call of the process's client ends within its budget (JOB_STORE_TIMEOUT_MS), on a
connection it had and on a new one; at most JOB_STORE_MAX_CONCURRENT calls wait at once, the
next refused at once; the model's status answers what it last saw, marked; the 404 of an
unknown job says what keeps jobs."""

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import kombu
import pytest
import redis

from imagegen import backend
from imagegen.distributed.budget import PLACE_GRACE
from imagegen.distributed.connection import store_client
from imagegen.distributed.shared_model import SharedModel
from imagegen.distributed.store import WORKERS, worker_key
from imagegen.errors import JobNotFound, JobStoreBusy
from tests.support.distributed import RedisServer

BUDGET = 0.4  # seconds: JOB_STORE_TIMEOUT_MS of these clients
# The retries' back-off (0.2 s, then 0.4 s at most) may start just before the budget is spent.
BOUND = BUDGET + 0.7
SLACK = 0.5  # a shared 2-core machine


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server


def client_of(server: RedisServer, max_waiting: int | None = None) -> redis.Redis:
    return store_client(server.url, timeout=BUDGET, max_waiting=max_waiting)


def timed(call) -> tuple[BaseException | None, float]:
    started = time.monotonic()
    try:
        call()
    except Exception as exc:
        return exc, time.monotonic() - started
    return None, time.monotonic() - started


@pytest.mark.parametrize("connected", [True, False], ids=["its-connection", "a-new-one"])
def test_a_call_to_a_frozen_store_ends_within_its_budget(redis_server, connected):
    """On a new connection the TCP connect succeeds (the kernel answers for a stopped
    process); the handshake and the command then wait on it, and so would each retry."""
    client = client_of(redis_server)
    if connected:
        client.ping()
    with redis_server.frozen():
        error, seconds = timed(lambda: client.set("k", "v"))
        pipeline_error, pipeline_seconds = timed(lambda: client.pipeline().get("k").execute())
    assert isinstance(error, redis.TimeoutError), error
    assert seconds < BOUND + SLACK, seconds
    assert isinstance(pipeline_error, redis.TimeoutError), pipeline_error
    assert pipeline_seconds < BOUND + SLACK, pipeline_seconds


def test_calls_waiting_at_once_are_bounded_and_the_next_is_refused_at_once(redis_server):
    client = client_of(redis_server, max_waiting=2)
    client.ping()
    errors: list[BaseException | None] = []
    with redis_server.frozen():
        waiting = [
            threading.Thread(target=lambda: errors.append(timed(lambda: client.get("k"))[0]))
            for _ in range(2)
        ]
        for thread in waiting:
            thread.start()
        time.sleep(0.1)  # both wait on the frozen store now
        refused, seconds = timed(lambda: client.get("k"))
        for thread in waiting:
            thread.join()
    assert isinstance(refused, JobStoreBusy) and seconds < PLACE_GRACE + 0.1, (refused, seconds)
    assert isinstance(refused, redis.ConnectionError)  # what rides over an outage rides over it
    assert refused.status == 503 and refused.retry_after
    assert [type(error) for error in errors] == [redis.TimeoutError] * 2
    # Every place came back: two calls may wait at once again, and a third may not.
    places = client.connection_pool.places
    assert places.acquire(blocking=False) and places.acquire(blocking=False)
    assert not places.acquire(blocking=False)
    places.release()
    places.release()
    assert client.get("nothing") is None


def test_a_call_without_a_place_bound_is_not_refused(redis_server):
    client = client_of(redis_server)
    assert client.connection_pool.places is None
    client.set("k", "v")
    assert client.get("k") == b"v"


WORKER = {"name": "w1", "state": "ready", "error": None, "job": None, "pulls": 1}


def test_model_status_answers_what_it_last_saw_while_the_store_is_frozen(redis_server):
    client = client_of(redis_server)
    client.flushdb()
    client.sadd(WORKERS, "w1")
    client.set(worker_key("w1"), json.dumps(WORKER))
    client.set("imagegen:pull", 1)
    model = SharedModel(backend.current_backend().loader, client)
    fresh = model.status()
    assert (fresh.state, fresh.store, fresh.store_age_seconds) == ("ready", "reachable", 0)
    assert [w.name for w in fresh.workers or []] == ["w1"]
    time.sleep(0.3)
    with redis_server.frozen():
        started = time.monotonic()
        stale = model.status()
        seconds = time.monotonic() - started
    assert seconds < BOUND + SLACK, seconds
    assert (stale.state, stale.store) == ("ready", "unreachable")
    assert stale.store_age_seconds is not None and stale.store_age_seconds >= 0.3
    assert stale.workers == fresh.workers


def test_model_status_of_a_store_never_reached_shows_no_worker(redis_server):
    client = store_client("redis://127.0.0.1:9/0", timeout=BUDGET, max_waiting=None)
    status = SharedModel(backend.current_backend().loader, client).status()
    assert (status.state, status.store, status.workers) == ("not_started", "unreachable", [])
    assert status.store_age_seconds is not None


def test_the_404_of_an_unknown_job_says_what_keeps_jobs_in_each_mode():
    in_process = replace(backend.current_backend(), distributed=False)
    assert in_process.job_not_found().message == (
        "No such job (jobs are kept while this process runs)"
    )
    error = replace(in_process, distributed=True, jobs_keep=37).job_not_found()
    assert isinstance(error, JobNotFound) and error.status == 404
    assert "while this process runs" not in error.message
    assert "keeps every unfinished job and the newest 37 finished ones, JOBS_KEEP" in (
        error.message
    )
    assert "a Redis without persistence loses them all when it restarts" in error.message


def test_a_job_message_published_to_a_frozen_store_gives_up(redis_server, settings):
    """Celery's Redis transport waits forever for a reply by default: a publish between the
    job's store write and Redis freezing would hold its request as long as Redis is frozen."""
    from imagegen.distributed.celery_app import app

    options, retry = app.conf.broker_transport_options, app.conf.task_publish_retry
    assert retry is False  # kombu's retry reconnects to the frozen Redis and waits again
    assert options["socket_timeout"] == max(2.0, settings.JOB_STORE_TIMEOUT_MS / 1000)
    # Its floor (a JOB_STORE_TIMEOUT_MS of 2 s or less), not the default's 5 s, for the wait.
    options = {**options, "socket_timeout": 2.0}
    bound = options["socket_timeout"] + 1  # docs/configuration.md
    with kombu.Connection(redis_server.url, transport_options=options) as connection:
        producer = connection.Producer()
        producer.publish({"wake": 1}, routing_key="imagegen-test")  # connected
        outcome: list[tuple[BaseException | None, float]] = []
        with redis_server.frozen():
            publish = threading.Thread(
                target=lambda: outcome.append(
                    timed(
                        lambda: producer.publish(
                            {"wake": 2},
                            routing_key="imagegen-test",
                            retry=retry,
                        )
                    )
                ),
                daemon=True,
            )
            publish.start()
            publish.join(bound + SLACK)
        publish.join(10)  # unfrozen: a publish that hung ends now
    assert outcome and outcome[0][1] < bound + SLACK, outcome
    assert isinstance(
        outcome[0][0], (OSError, kombu.exceptions.OperationalError, redis.RedisError)
    ), outcome  # gave up
