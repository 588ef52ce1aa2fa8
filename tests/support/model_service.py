"""Helpers for tests that drive the image service over HTTP."""

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests

from tests.support.local_hub import LocalHub
from tests.support.processes import AppServer
from tests.support.xdist_schedule import stack_of

SD_REPO = "testorg/tiny-sd"
SDXL_REPO = "testorg/tiny-sdxl"
SD_INPAINT_REPO = "testorg/tiny-sd-inpainting"  # SD_REPO's inpainting checkpoint (9 channels)


def wait_for_state(app: AppServer, states: set[str], timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        status = requests.get(app.url("/model/status"), timeout=10).json()
        if status["state"] in states:
            return status
        assert time.monotonic() < deadline, f"still {status} after {timeout}s\n{app.log_tail()}"
        time.sleep(0.05)


def pull_until_ready(app: AppServer, timeout: float = 60) -> dict:
    response = requests.post(app.url("/model/pull"), timeout=10)
    assert response.status_code in (200, 202), response.text
    status = wait_for_state(app, {"ready", "failed"}, timeout)
    assert status["state"] == "ready", status
    return status


def model_service_env(hub_url: str, share: Path, work: Path) -> dict[str, str]:
    """The image service's settings for a test hub and share (cache and images in `work`)."""
    return {
        "MODEL_ID": SD_REPO,
        "MODEL_REVISION": "main",
        "MODEL_VARIANT": "fp16",
        "MODEL_DIR": str(share),
        "DOWNLOAD_CACHE_DIR": str(work / "cache"),
        "OUTPUT_DIR": str(work / "images"),
        "HF_ENDPOINT": hub_url,
        "DEVICE": "cpu",
        "MONGODB_URI": "mongodb://127.0.0.1:9/unused",  # the image API never touches it
        "GEN_DEFAULT_STEPS": "2",
    }


# The two ways the service runs jobs: the same tests run against both.
MODES = ("in-process", "distributed")


# How long a pull may take: in distributed mode the worker imports the model code at its
# first load (PRELOAD_MODEL_CODE=0), on a busy 2-core machine.
PULL_TIMEOUT = {"in-process": 60, "distributed": 180}


@contextmanager
def ready_app(hub_root: Path, work: Path, **env: str) -> Iterator[AppServer]:
    """An app of its own (hub, share, cache) in process with the tiny SD model pulled and
    loaded, for a test module that shares one ready app across its tests."""
    with LocalHub(hub_root) as hub:
        base = {**model_service_env(hub.url, work / "share", work), **env}
        with AppServer(base, work / "app.log") as app:
            pull_until_ready(app, timeout=PULL_TIMEOUT["in-process"])
            yield app


@contextmanager
def ready_in_mode(
    request: pytest.FixtureRequest, mode: str, hub_root: Path, work: Path, **env: str
) -> Iterator[AppServer]:
    """The ready app of a test module that runs in both MODES: in process, an
    app of its own (ready_app); distributed, a web replica with these settings on the session's
    shared stack (tests/conftest.py `shared_stack`: one Redis and one worker, the model pulled),
    so each module pays for a web process, not for a Redis, a worker and a pull. The settings
    must be ones the web side reads; the jobs and images of the modules meet in the one store,
    so a test finds its own by prompt, id or newest first."""
    if mode == "in-process":
        with ready_app(hub_root, work, **env) as app:
            yield app
        return
    stack = stack_of(request)
    with stack.replica(work / "web.log", **env) as app:
        yield app
