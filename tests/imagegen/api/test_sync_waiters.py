"""Synchronous requests waiting for their images, joiners of one job included, are bounded
below the worker's real thread count (SYNC_WAITERS_MAX), in both job modes: past it, 503 with
Retry-After at once, and /health keeps answering. The worker is started with fewer threads
(`--threads`, through GUNICORN_CMD_ARGS) than GUNICORN_THREADS says: the bound follows the
real count."""

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.support.jobs import cancel_all
from tests.support.model_service import MODES, ready_in_mode
from tests.support.processes import AppServer

LONG = {"prompt": "a long synchronous one", "steps": "400", "size": "64x64"}


@pytest.fixture(scope="module", params=MODES)
def app(
    request: pytest.FixtureRequest, hub_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AppServer]:
    env = {
        "GEN_MAX_STEPS": "500",
        "GEN_SYNC_REFUSE_FACTOR": "0",
        # 4 real threads: EVENT_STREAMS_MAX 1, so SYNC_WAITERS_MAX 4 - 1 - 2 = 1. With the 16
        # GUNICORN_THREADS says it would be 10.
        "GUNICORN_THREADS": "16",
        "GUNICORN_CMD_ARGS": "--threads 4",
    }
    work = tmp_path_factory.mktemp(f"sync-waiters-{request.param}")
    with ready_in_mode(request, request.param, hub_root, work, **env) as server:
        yield server


def running(app: AppServer) -> bool:
    jobs = requests.get(app.url("/jobs"), timeout=10).json()
    mine = [j for j in jobs if j["parameters"]["prompt"] == LONG["prompt"]]
    return any(j["state"] == "running" for j in mine)


def test_a_joiner_past_the_bound_gets_503_and_health_answers(app: AppServer):
    key = {"Idempotency-Key": f"join-{time.monotonic_ns()}"}
    first: list[requests.Response] = []
    waiter = threading.Thread(
        target=lambda: first.append(
            requests.post(app.url("/generate"), data=LONG, headers=key, timeout=120)
        )
    )
    waiter.start()
    try:
        deadline = time.monotonic() + 30
        while not running(app):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        joiner = requests.post(app.url("/generate"), data=LONG, headers=key, timeout=30)
        assert joiner.status_code == 503, joiner.text
        assert joiner.headers["Retry-After"] == "5"
        assert "SYNC_WAITERS_MAX" in joiner.json()["error"]["message"]
        started = time.monotonic()
        assert requests.get(app.url("/health"), timeout=10).status_code == 200
        assert time.monotonic() - started < 1.0
    finally:
        cancel_all(app)
        waiter.join(60)
    assert first and first[0].status_code == 409  # cancelled; its place is given back
    quick = requests.post(app.url("/generate"), data={"prompt": "after", "steps": "1"}, timeout=60)
    assert quick.status_code == 200, quick.text
