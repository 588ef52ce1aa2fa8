"""The service started the plainest way, `gunicorn config.wsgi --workers 1 --threads 8`, with
no config file, no ./scripts/serve and nothing else started, configured by environment
variables alone: it pulls, generates, keeps todos, sends its headers, and its bounds follow
the threads gunicorn was told (everything it needs happens in the settings or config/wsgi.py,
none of it in gunicorn's hooks)."""

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from scripts.embedded_mongo import EmbeddedMongo
from tests.core.test_file_modes import assert_private, modes_beneath
from tests.support.jobs import cancel_all
from tests.support.local_hub import LocalHub
from tests.support.model_service import model_service_env, pull_until_ready
from tests.support.processes import ROOT, AppServer
from tests.support.sse import open_stream

GUNICORN = Path(sys.executable).with_name("gunicorn")
# A synchronous generation that runs until it is cancelled.
LONG = {"prompt": "a long synchronous one", "steps": "500", "size": "256x256"}


class PlainGunicorn(AppServer):
    """gunicorn as an operator would start it by hand: its own defaults, no config file, an
    environment that holds only the service's variables."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        super().__init__(env, log_path)
        self.env = {"PATH": os.environ["PATH"], **env}

    def launch(self) -> "PlainGunicorn":
        command = [str(GUNICORN), "config.wsgi", "--workers", "1", "--threads", "8"]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [*command, "--bind", f"127.0.0.1:{self.port}"], cwd=ROOT, env=self.env,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        return self


@pytest.fixture(scope="module")
def app(
    hub_root: Path, mongo: EmbeddedMongo, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PlainGunicorn]:
    """The plain start on the session's database (tests/conftest.py `mongo`)."""
    work = tmp_path_factory.mktemp("plain-gunicorn")
    with LocalHub(hub_root) as hub:
        env = {
            **model_service_env(hub.url, work / "share", work),
            "HOME": str(work),
            "SECRET_KEY": "plain-start-secret",
            "DATA_DIR": str(work / "data"),
            "HF_HUB_CACHE": str(work / "hf-cache"),
            "MONGODB_URI": mongo.uri(),
            # LONG's steps, and no refusal by estimate: it must wait, not be refused.
            "GEN_MAX_STEPS": "500",
            "GEN_SYNC_REFUSE_FACTOR": "0",
            # One core for the long jobs the bounds are tested beside, as the suite's own apps
            # (tests/settings.py): the other one answers the requests.
            "TORCH_THREADS": "1",
        }
        server = PlainGunicorn(env, work / "app.log").start(timeout=180)
        try:
            pull_until_ready(server, timeout=180)
            yield server
        finally:
            server.stop()


def test_it_pulled_and_generates_with_its_headers(app: PlainGunicorn):
    answer = requests.post(
        app.url("/generate"), data={"prompt": "a red square", "size": "64x64"}, timeout=120
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["Content-Type"] == "image/png"
    assert answer.content.startswith(b"\x89PNG")
    assert answer.headers["X-App-Version"] and answer.headers["X-Request-ID"]


def test_what_its_worker_writes_is_its_user_alone(app: PlainGunicorn):
    """Files 0600 in folders 0700 (core/file_modes.py, set in config/wsgi.py): the model its
    pull placed on the share, a generated image and its record."""
    made = requests.post(app.url("/generate"), data={"prompt": "private", "size": "64x64"})
    assert made.status_code == 200, made.text
    images = Path(app.env["OUTPUT_DIR"])
    assert list(images.glob("*.png")) and list(images.glob("*.json"))
    assert_private(modes_beneath(Path(app.env["MODEL_DIR"]), images))


def test_a_todo_round_trip(app: PlainGunicorn):
    title = f"plain start {time.monotonic_ns()}"
    created = requests.post(app.url("/todo"), json={"todo": {"title": title}}, timeout=30)
    assert created.status_code == 201, created.text
    todo = created.json()["data"]
    read = requests.get(app.url(f"/todo/{todo['id']}"), timeout=30)
    assert read.status_code == 200 and read.json()["data"]["title"] == title
    deleted = requests.delete(app.url(f"/todo/{todo['id']}"), timeout=30)
    assert deleted.status_code == 202, deleted.text
    missing = requests.get(app.url(f"/todo/{todo['id']}"), timeout=30)
    assert missing.status_code == 404 and missing.json()["data"] is None


def test_the_synchronous_waiters_follow_the_threads_gunicorn_was_told(app: PlainGunicorn):
    """8 threads: EVENT_STREAMS_MAX 2, so SYNC_WAITERS_MAX 8 - 2 - 2 = 4 (with the 16 threads
    GUNICORN_THREADS defaults to it would be 10): four wait for one job, the fifth gets 503."""
    key = {"Idempotency-Key": f"plain-{time.monotonic_ns()}"}
    answers: list[requests.Response] = []

    def wait() -> None:
        answers.append(requests.post(app.url("/generate"), data=LONG, headers=key, timeout=180))

    waiters = [threading.Thread(target=wait) for _ in range(4)]
    try:
        for waiter in waiters:
            waiter.start()
            waiter.join(0.5)  # it waits for the job (a refusal would be back by now)
            assert waiter.is_alive(), answers[-1].text
        fifth = requests.post(app.url("/generate"), data=LONG, headers=key, timeout=30)
        assert fifth.status_code == 503, fifth.text
        assert "SYNC_WAITERS_MAX" in fifth.json()["error"]["message"]
        assert requests.get(app.url("/health"), timeout=10).status_code == 200
    finally:
        cancel_all(app)
        for waiter in waiters:
            waiter.join(120)
    assert [answer.status_code for answer in answers] == [409] * 4  # cancelled


def test_the_event_streams_follow_the_threads_gunicorn_was_told(app: PlainGunicorn):
    """8 threads: EVENT_STREAMS_MAX 8 // 4 = 2 (4 with GUNICORN_THREADS' 16): two streams of a
    running job are held, the third gets 503, and /health still answers beside them."""
    submitted = requests.post(app.url("/generate"), data={**LONG, "async": "true"}, timeout=30)
    assert submitted.status_code == 202, submitted.text
    url = app.url(f"/jobs/{submitted.json()['id']}/events")
    held = [open_stream(url) for _ in range(2)]
    try:
        assert [stream.status_code for stream in held] == [200, 200]
        third = requests.get(url, timeout=30)
        assert third.status_code == 503, third.text
        assert "EVENT_STREAMS_MAX" in third.json()["error"]["message"]
        started = time.monotonic()
        assert requests.get(app.url("/health"), timeout=10).status_code == 200
        assert time.monotonic() - started < 2
    finally:
        for stream in held:
            stream.close()
        cancel_all(app)
