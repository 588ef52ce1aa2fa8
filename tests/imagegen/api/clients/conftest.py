"""The package's apps, the tiny model pulled, shared by its tests: one with API_TOKEN set
behind a trusted proxy (127.0.0.1), as on Azure, and an open one. Their synchronous requests
wait behind long jobs (GEN_SYNC_TIMEOUT 60 s: long for a busy machine) and the retry and
timeout cases time out on purpose, each under a GEN_SYNC_TIMEOUT of a few seconds of its own
(read per request), so neither refuses one by its estimate (GEN_SYNC_REFUSE_FACTOR=0; the
refusal in each protocol's shape: tests/imagegen/generation/test_estimates.py).

In process, both are this process's app on a loopback port (tests/support/in_process_app.py),
one backend with the model pulled once for the package, each test under the token app's or
the open app's settings (read per request): the real clients (the openai SDK, webuiapi, the
MCP client, requests) talk HTTP to it and no gunicorn starts. The app under gunicorn in this
mode, one smoke per protocol: test_gunicorn_smoke.py.

Tests marked `both_modes` run in distributed mode too (Redis and a worker behind the token
app): one smoke per protocol, and each protocol path that reads or changes the job board or
the shared runs (progress, interrupt and skip, a joined retry, image links from the shared
store), against web replicas on the session's shared Redis and worker: the token app's under
gunicorn, the open app's served here (tests/support/stack_replica.py). What
the job mode changes beneath them has its own tests in both modes
(tests/imagegen/generation/test_jobs.py, tests/imagegen/api/test_job_events.py,
tests/imagegen/distributed/); a protocol's parsing and answers are the same code in either mode."""

import ipaddress
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
from django.test import override_settings

from tests.support.in_process_app import LoopbackApp, in_process_app
from tests.support.local_hub import LocalHub
from tests.support.model_service import MODES, PULL_TIMEOUT, model_service_env, wait_for_state
from tests.support.processes import AppServer
from tests.support.stack_replica import stack_replica_here

TOKEN = "protocol-test-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
LINK_TTL = 300  # seconds an image link of the token app lives (its expiry: a TTL of 1 s)
SYNC_TIMEOUT = 60  # seconds the apps' synchronous requests wait

# Both apps: long synchronous requests, on purpose (above).
SHARED = {"GEN_MAX_STEPS": "500", "GEN_SYNC_REFUSE_FACTOR": "0",
          "GEN_SYNC_TIMEOUT": str(SYNC_TIMEOUT)}  # fmt: skip
TOKEN_ENV = {"API_TOKEN": TOKEN, "TRUSTED_PROXIES": "127.0.0.1",
             "IMAGE_URL_TTL": str(LINK_TTL), **SHARED}  # fmt: skip
OPEN_ENV = dict(SHARED)
# The same as Django settings, for the app in process.
TOKEN_SETTINGS = {"API_TOKEN": TOKEN, "TRUSTED_PROXIES": [ipaddress.ip_network("127.0.0.1")],
                  "IMAGE_URL_TTL": LINK_TTL, "GEN_SYNC_TIMEOUT": SYNC_TIMEOUT}  # fmt: skip
OPEN_SETTINGS = {"API_TOKEN": "", "TRUSTED_PROXIES": [], "GEN_SYNC_TIMEOUT": SYNC_TIMEOUT}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "mode" in metafunc.fixturenames:
        both = metafunc.definition.get_closest_marker("both_modes") is not None
        metafunc.parametrize("mode", MODES if both else ("in-process",), scope="package")


@pytest.fixture(scope="package")
def in_process(hub_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackApp]:
    """This process's app with the model pulled, for both apps' tests in process."""
    work = tmp_path_factory.mktemp("protocols-in-process")
    with in_process_app(hub_root, work, GEN_MAX_STEPS=500, GEN_SYNC_REFUSE_FACTOR=0) as app:
        yield app


@pytest.fixture(scope="package")
def token_replica(tmp_path_factory: pytest.TempPathFactory, shared_stack) -> Iterator[AppServer]:
    """The token app in distributed mode: a web replica on the session's shared stack."""
    with shared_stack.replica(tmp_path_factory.mktemp("token-app") / "web.log", **TOKEN_ENV) as app:
        yield app


@pytest.fixture
def open_replica(shared_stack) -> Iterator[LoopbackApp]:
    """The open app in distributed mode: a web replica served here on the session's shared
    stack (tests/support/stack_replica.py), for one test (the token app's replica is the
    one under gunicorn)."""
    with (
        stack_replica_here(shared_stack, **OPEN_ENV) as app,
        override_settings(**OPEN_SETTINGS),
    ):
        yield app


@contextmanager
def app_in_mode(request: pytest.FixtureRequest, mode: str, settings: dict, replica: str):
    """The distributed `replica`, or the app in process under `settings` for the test."""
    if mode == "distributed":
        yield request.getfixturevalue(replica)
        return
    served = request.getfixturevalue("in_process")
    with override_settings(**settings):
        yield served


@pytest.fixture
def token_app(request: pytest.FixtureRequest, mode: str) -> Iterator[AppServer]:
    with app_in_mode(request, mode, TOKEN_SETTINGS, "token_replica") as app:
        yield app


@pytest.fixture
def open_app(request: pytest.FixtureRequest, mode: str) -> Iterator[AppServer]:
    with app_in_mode(request, mode, OPEN_SETTINGS, "open_replica") as app:
        yield app


@pytest.fixture(scope="package")
def gunicorn_token_app(
    hub_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AppServer]:
    """The token app under gunicorn (in-process jobs), its model pulled with the token: each
    protocol's smoke (test_gunicorn_smoke.py), and what needs gunicorn's own handling of a
    connection (a client gone mid-stream)."""
    work = tmp_path_factory.mktemp("gunicorn-token-app")
    with LocalHub(hub_root) as hub:
        env = {**model_service_env(hub.url, work / "share", work), **TOKEN_ENV}
        with AppServer(env, work / "app.log") as app:
            pulled = requests.post(app.url("/model/pull"), headers=BEARER, timeout=10)
            assert pulled.status_code == 202, pulled.text
            status = wait_for_state(app, {"ready", "failed"}, PULL_TIMEOUT["in-process"])
            assert status["state"] == "ready"
            yield app


@pytest.fixture
def gunicorn_app(request: pytest.FixtureRequest, mode: str) -> Iterator[AppServer]:
    """The token app under gunicorn in either mode, left with nothing queued or running."""
    name = "token_replica" if mode == "distributed" else "gunicorn_token_app"
    app = request.getfixturevalue(name)
    yield app
    settle(app)


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
