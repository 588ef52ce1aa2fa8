"""Two apps under gunicorn with the tiny model pulled, shared by this package's tests: one with
API_TOKEN set behind a trusted proxy (127.0.0.1), as on Azure, and an open one with a short
GEN_SYNC_TIMEOUT for the retry and timeout cases. Their synchronous requests wait behind long
jobs and time out on purpose, so neither refuses one by its estimate (GEN_SYNC_REFUSE_FACTOR=0;
the refusal in each protocol's shape: tests/imagegen/test_estimates.py).

Every test runs in process. Those marked `both_modes` run in distributed mode too (Redis and a
worker behind the token app): one smoke per protocol, and each protocol path that reads or
changes the job board or the shared runs (progress, interrupt and skip, a joined retry, image
links from the shared store), against a web replica on the session's shared Redis and worker.
What the job mode changes beneath them has its own tests in both modes
(tests/imagegen/test_jobs.py, test_job_events.py, tests/distributed/); a protocol's parsing and
answers are the same code in either mode."""

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.support.local_hub import LocalHub
from tests.support.model_service import (
    MODES,
    PULL_TIMEOUT,
    model_service_env,
    ready_in_mode,
    wait_for_state,
)
from tests.support.processes import AppServer

TOKEN = "protocol-test-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
LINK_TTL = 4  # seconds an image link of the token app lives
OPEN_SYNC_TIMEOUT = 8  # seconds the open app's synchronous requests wait


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "mode" in metafunc.fixturenames:
        both = metafunc.definition.get_closest_marker("both_modes") is not None
        metafunc.parametrize("mode", MODES if both else ("in-process",), scope="package")


@pytest.fixture(scope="package")
def token_app(
    request: pytest.FixtureRequest,
    mode: str,
    hub_root: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[AppServer]:
    env = {
        "API_TOKEN": TOKEN,
        "TRUSTED_PROXIES": "127.0.0.1",
        "IMAGE_URL_TTL": str(LINK_TTL),
        "GEN_MAX_STEPS": "500",
        "GEN_SYNC_TIMEOUT": "60",
        "GEN_SYNC_REFUSE_FACTOR": "0",  # long synchronous requests, on purpose (below)
    }
    work = tmp_path_factory.mktemp(f"token-app-{mode}")
    if mode == "distributed":  # a web replica on the session's shared stack, pulled already
        with request.getfixturevalue("shared_stack").replica(work / "web.log", **env) as app:
            yield app
        return
    with LocalHub(hub_root) as hub:
        base = model_service_env(hub.url, work / "share", work)
        with AppServer({**base, **env}, work / "app.log") as app:
            pulled = requests.post(app.url("/model/pull"), headers=BEARER, timeout=10)
            assert pulled.status_code == 202, pulled.text
            status = wait_for_state(app, {"ready", "failed"}, PULL_TIMEOUT[mode])
            assert status["state"] == "ready"
            yield app


@pytest.fixture(scope="package")
def open_app(
    request: pytest.FixtureRequest,
    mode: str,
    hub_root: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[AppServer]:
    env = {
        "GEN_MAX_STEPS": "500",
        "GEN_SYNC_TIMEOUT": str(OPEN_SYNC_TIMEOUT),
        "GEN_SYNC_REFUSE_FACTOR": "0",  # long synchronous requests, on purpose (below)
    }
    work = tmp_path_factory.mktemp(f"open-app-{mode}")
    with ready_in_mode(request, mode, hub_root, work, **env) as app:
        yield app


@pytest.fixture
def app(token_app: AppServer) -> Iterator[AppServer]:
    """The token app for one test, left with nothing queued or running."""
    yield token_app
    settle(token_app)


def jobs(app: AppServer, prompt: str | None = None) -> list[dict]:
    """The app's jobs (newest first), those of one prompt when given."""
    found = requests.get(app.url("/jobs"), params={"limit": 200}, headers=BEARER).json()
    return [job for job in found if prompt is None or job["parameters"]["prompt"] == prompt]


def wait_until(check, timeout: float = 60, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(interval)
    return result


def settle(app: AppServer) -> None:
    """Cancels whatever is queued or running and waits until nothing runs."""
    for job in jobs(app):
        if job["state"] in ("queued", "running"):
            requests.delete(app.url(f"/jobs/{job['id']}"), headers=BEARER)
    wait_until(lambda: all(j["state"] not in ("queued", "running") for j in jobs(app)))


def start_blocker(app: AppServer, prompt: str = "blocker") -> str:
    """A long asynchronous job (minutes, even on a fast machine) that holds the worker until
    cancelled; returns its id once it runs, so what is submitted next waits in the queue."""
    response = requests.post(
        app.url("/generate"),
        data={
            "prompt": prompt,
            "steps": "400",
            "guidance": "0",
            "size": "256x256",
            "async": "true",
        },
        headers=BEARER,
    )
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    wait_until(lambda: requests.get(app.url(f"/jobs/{job_id}"), headers=BEARER).json()["state"]
               == "running")  # fmt: skip
    return job_id


def cancel(app: AppServer, job_id: str) -> None:
    requests.delete(app.url(f"/jobs/{job_id}"), headers=BEARER)
