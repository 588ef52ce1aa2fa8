"""A tiny real diffusers model served by a local hub, and the app under gunicorn pulling it."""

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from tests.support.local_hub import LocalHub
from tests.support.processes import AppServer
from tests.support.tiny_model import build_tiny_pipeline

SD_REPO = "testorg/tiny-sd"
SDXL_REPO = "testorg/tiny-sdxl"


@pytest.fixture(scope="session")
def hub_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hub")
    build_tiny_pipeline(root / SD_REPO, layout="sd")
    build_tiny_pipeline(root / SDXL_REPO, layout="sdxl")
    return root


@pytest.fixture
def hub(hub_root: Path) -> Iterator[LocalHub]:
    with LocalHub(hub_root) as server:
        yield server


@pytest.fixture
def share(tmp_path: Path) -> Path:
    """The mounted share of one test (MODEL_DIR)."""
    path = tmp_path / "share"
    path.mkdir()
    return path


@pytest.fixture
def start_app(tmp_path: Path, hub: LocalHub, share: Path) -> Iterator[Callable[..., AppServer]]:
    """Starts app processes on this test's share; each gets a fresh local download cache,
    as a new container revision would."""
    started: list[AppServer] = []

    def start(**env: str) -> AppServer:
        n = len(started)
        base = {
            "MODEL_ID": SD_REPO,
            "MODEL_REVISION": "main",
            "MODEL_VARIANT": "fp16",
            "MODEL_DIR": str(share),
            "DOWNLOAD_CACHE_DIR": str(tmp_path / f"cache-{n}"),
            "HF_ENDPOINT": hub.url,
            "DEVICE": "cpu",
            "MONGODB_URI": "mongodb://127.0.0.1:9/unused",
            "GEN_DEFAULT_STEPS": "2",
        }
        app = AppServer({**base, **env}, tmp_path / f"app-{n}.log").start()
        started.append(app)
        return app

    yield start
    for app in started:
        app.stop()


def wait_for_state(app: AppServer, states: set[str], timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        status = requests.get(app.url("/model/status"), timeout=10).json()
        if status["state"] in states:
            return status
        assert time.monotonic() < deadline, f"still {status} after {timeout}s\n{app.log_tail()}"
        time.sleep(0.05)


def pull_until_ready(app: AppServer) -> dict:
    response = requests.post(app.url("/model/pull"), timeout=10)
    assert response.status_code in (200, 202), response.text
    status = wait_for_state(app, {"ready", "failed"})
    assert status["state"] == "ready", status
    return status
