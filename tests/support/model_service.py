"""Helpers for tests that drive the image service over HTTP."""

import time

import requests

from tests.support.processes import AppServer

SD_REPO = "testorg/tiny-sd"
SDXL_REPO = "testorg/tiny-sdxl"


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
