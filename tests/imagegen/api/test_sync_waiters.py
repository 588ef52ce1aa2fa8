"""Synchronous requests waiting for their images, joiners of one job included, are bounded
below the worker's real thread count (SYNC_WAITERS_MAX), in both job modes: past it, 503 with
Retry-After at once, and /health keeps answering. Distributed, the web replica runs under
gunicorn started with fewer threads (`--threads`, through GUNICORN_CMD_ARGS) than
GUNICORN_THREADS says: the bound follows the real count. In process, the app is served here
(tests/support/in_process.py) with GUNICORN_THREADS at that count, so the bound is the same;
the real count read from gunicorn's command line is the distributed run's claim (and
tests/config/test_plain_gunicorn.py's), the same settings in either mode."""

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.support.in_process import Served, ready_in_either_mode
from tests.support.jobs import cancel_all
from tests.support.model_service import MODES

LONG = {"prompt": "a long synchronous one", "steps": "400", "size": "64x64"}
QUICK = {"prompt": "after", "steps": "1", "size": "64x64"}


# 4 real threads: EVENT_STREAMS_MAX 1, so SYNC_WAITERS_MAX 4 - 1 - 2 = 1. Under gunicorn they
# are the 4 of its command line; with the 16 GUNICORN_THREADS says it would be 10. Their
# JOB_STORE_MAX_CONCURRENT would be 4 - 4 -> 1: the waiter's own reads of the job store would
# then refuse (503, JOB_STORE_MAX_CONCURRENT) the test's calls that meet one, the joiner's
# among them, so two may wait on the store at once (the waiter's and the test's).
THREADS = {
    "distributed": {
        "GUNICORN_THREADS": "16",
        "GUNICORN_CMD_ARGS": "--threads 4",
        "JOB_STORE_MAX_CONCURRENT": "2",
    },
    "in-process": {"GUNICORN_THREADS": "4"},
}


@pytest.fixture(scope="module", params=MODES)
def app(
    request: pytest.FixtureRequest, hub_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    env = {"GEN_MAX_STEPS": "500", "GEN_SYNC_REFUSE_FACTOR": "0", **THREADS[request.param]}
    work = tmp_path_factory.mktemp(f"sync-waiters-{request.param}")
    with ready_in_either_mode(request, request.param, hub_root, work, **env) as server:
        # Distributed, the session's shared worker runs the jobs of every module: none of
        # theirs may hold it while this module's job waits to run.
        cancel_all(server)
        yield server


def running(app: Served) -> bool:
    jobs = requests.get(app.url("/jobs"), timeout=10).json()
    mine = [j for j in jobs if j["parameters"]["prompt"] == LONG["prompt"]]
    return any(j["state"] == "running" for j in mine)


def test_a_joiner_past_the_bound_gets_503_and_health_answers(app: Served):
    key = {"Idempotency-Key": f"join-{time.monotonic_ns()}"}
    first: list[requests.Response] = []
    waiter = threading.Thread(
        target=lambda: first.append(
            requests.post(app.url("/generate"), data=LONG, headers=key, timeout=120)
        )
    )
    waiter.start()
    try:
        # Generous on a loaded machine, where a worker of a niced suite takes a while.
        deadline = time.monotonic() + 120
        while not running(app):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        joiner = requests.post(app.url("/generate"), data=LONG, headers=key, timeout=60)
        assert joiner.status_code == 503, joiner.text
        assert joiner.headers["Retry-After"] == "5"
        assert "SYNC_WAITERS_MAX" in joiner.json()["error"]["message"]
        # /health answers beside the waiter: before its job ends, not after a thread frees
        # (a clock would say it too, but a loaded machine stretches any bound).
        assert requests.get(app.url("/health"), timeout=60).status_code == 200
        assert running(app) and waiter.is_alive() and not first
    finally:
        cancel_all(app, timeout=120)
        waiter.join(120)
    assert first and first[0].status_code == 409  # cancelled; its place is given back
    quick = requests.post(app.url("/generate"), data=QUICK, timeout=120)
    assert quick.status_code == 200, quick.text
