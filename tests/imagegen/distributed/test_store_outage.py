"""A frozen job store, from outside: a real redis-server stopped with SIGSTOP under a web
replica's routes, served in this process over HTTP (what is asserted is the routes' and the
job store client's behaviour, not gunicorn's). Every job route answers 503 with Retry-After
within the bound that docs/distributed.md states (a request already waiting for its job
included), and GET /model/status answers 200 with what it last saw, marked. No worker: the
jobs stay queued, so the synchronous requests wait. /health answering at once on a gunicorn
replica whose threads job requests outnumber, with a worker running a job, is
tests/imagegen/distributed/test_replicas.py's freeze."""

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from imagegen.api.errors import GENERATION_UNCONFIRMED, JOB_STORE_UNREACHABLE, MAY_HAVE_QUEUED
from imagegen.errors import JobStoreBusy
from tests.support.distributed import RedisServer, replica_here
from tests.support.in_process import LoopbackApp
from tests.support.local_hub import LocalHub
from tests.support.model_service import model_service_env

TIMEOUT_MS = 800
THREADS = 4
PLACES = 2  # JOB_STORE_MAX_CONCURRENT
# docs/distributed.md: a job route answers within twice JOB_STORE_TIMEOUT_MS plus two seconds
# (a second call: an OpenAI, A1111 or keyed request gives back its place among the runs).
BOUND = 2 * (TIMEOUT_MS / 1000 + 1)
SLACK = 1.5  # a shared 2-core machine
# A generating route adds that its job may have been queued (retry with the same key).
ANSWERS = {
    JOB_STORE_UNREACHABLE, GENERATION_UNCONFIRMED, JobStoreBusy.message,
    f"{JobStoreBusy.message}. {MAY_HAVE_QUEUED}",
}  # fmt: skip


@dataclass
class Replica:
    """A web replica served here, and the Redis under it."""

    app: LoopbackApp
    redis: RedisServer


@pytest.fixture(scope="module")
def stack(hub_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replica]:
    work = tmp_path_factory.mktemp("store-outage")
    with LocalHub(hub_root) as hub, RedisServer(work / "redis") as server:
        env = {
            **model_service_env(hub.url, work / "share", work),
            "JOB_BROKER_URL": server.url,
            "JOB_STORE_TIMEOUT_MS": str(TIMEOUT_MS),
            "GUNICORN_THREADS": str(THREADS),
            "JOB_STORE_MAX_CONCURRENT": str(PLACES),
            "GEN_QUEUE_MAX": "50",
            # Three synchronous requests wait through the outage (below the 4 threads).
            "SYNC_WAITERS_MAX": "3",
        }
        with replica_here(**env) as app:
            assert requests.post(app.url("/model/pull"), timeout=10).status_code == 202
            deadline = time.monotonic() + 60  # downloaded to the share; no worker loads it
            while not requests.get(app.url("/model/status"), timeout=10).json()["weights_on_share"]:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            yield Replica(app, server)


def timed(method: str, url: str, **kwargs) -> tuple[requests.Response, float]:
    started = time.monotonic()
    response = requests.request(method, url, timeout=60, **kwargs)
    return response, time.monotonic() - started


def in_background(method: str, url: str, answers: list, **kwargs) -> threading.Thread:
    thread = threading.Thread(target=lambda: answers.append(timed(method, url, **kwargs)))
    thread.start()
    return thread


def assert_unavailable(response: requests.Response, seconds: float, what: str) -> None:
    assert response.status_code == 503, (what, response.text)
    assert int(response.headers["Retry-After"]) > 0, what
    assert response.json()["error"]["message"] in ANSWERS, (what, response.text)
    assert seconds < BOUND + SLACK, (what, seconds)


def submit(app) -> str:
    response = requests.post(app.url("/generate"), data={"prompt": "q", "async": "true"})
    assert response.status_code == 202, response.text
    return response.json()["id"]


def test_every_job_route_answers_503_within_the_bound_and_status_200(stack):
    app = stack.app
    queued = submit(app)
    waiting: list = []  # synchronous requests waiting for their jobs when Redis freezes
    waiters = []
    for path, body in [
        ("/generate", {"data": {"prompt": "sync"}}),
        ("/v1/images/generations", {"json": {"prompt": "o"}}),
        ("/sdapi/v1/txt2img", {"json": {"prompt": "a"}}),
    ]:
        waiters.append(in_background("POST", app.url(path), waiting, **body))
        time.sleep(0.5)  # one at a time: only two of their calls may be in flight at once
    time.sleep(1)
    assert not waiting, [(response.url, response.text) for response, _ in waiting]
    with stack.redis.frozen():
        frozen_at = time.monotonic()
        for waiter in waiters:
            waiter.join()
        for response, _ in waiting:
            assert_unavailable(response, time.monotonic() - frozen_at, response.url)
        status, seconds = timed("GET", app.url("/model/status"))
        for method, path, kwargs in [
            ("GET", "/jobs", {}),
            ("GET", f"/jobs/{queued}", {}),
            ("GET", f"/jobs/{queued}/events", {}),
            ("DELETE", f"/jobs/{queued}", {}),
            ("POST", "/generate", {"data": {"prompt": "q", "async": "true"}}),
            ("POST", "/generate", {"data": {"prompt": "q"}}),
            ("POST", "/v1/images/generations", {"json": {"prompt": "o"}}),
            ("POST", "/sdapi/v1/txt2img", {"json": {"prompt": "a"}}),
            ("GET", "/sdapi/v1/progress", {}),
        ]:
            assert_unavailable(*timed(method, app.url(path), **kwargs), f"{method} {path}")
    assert status.status_code == 200 and seconds < BOUND + SLACK, (status.text, seconds)
    assert status.json()["store"] == "unreachable"
    assert status.json()["store_age_seconds"] >= 1.5  # what it read before the freeze
    back = requests.get(app.url("/model/status"), timeout=10).json()
    assert (back["store"], back["store_age_seconds"]) == ("reachable", 0)


def test_an_unknown_job_says_the_store_keeps_jobs_not_this_process(stack):
    response = requests.get(stack.app.url("/jobs/0123456789abcdef"), timeout=10)
    assert response.status_code == 404
    message = response.json()["error"]["message"]
    assert "keeps every unfinished job and the newest 200 finished ones, JOBS_KEEP" in message
    assert "a Redis without persistence loses them all when it restarts" in message
