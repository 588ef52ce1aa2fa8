"""The job API as the job tests use it, in either mode and through any replica: read a job,
wait for a state, and leave the queue idle for the next test."""

import time
from collections.abc import Callable

import requests

from tests.support.processes import AppServer

FINISHED = ("succeeded", "failed", "cancelled")


def finished(j: dict) -> bool:
    return j["state"] in FINISHED


def job(app: AppServer, job_id: str) -> dict:
    response = requests.get(app.url(f"/jobs/{job_id}"))
    assert response.status_code == 200, response.text
    return response.json()


def wait_until(
    app: AppServer, job_id: str, predicate: Callable[[dict], bool], timeout: float = 120
) -> dict:
    """The job as soon as `predicate` holds for it."""
    deadline = time.monotonic() + timeout
    while not predicate(current := job(app, job_id)):
        assert time.monotonic() < deadline, current
        time.sleep(0.02)
    return current


def cancel_all(app: AppServer, timeout: float = 30) -> None:
    """Cancels every job still queued or running, and waits until none is."""
    for j in requests.get(app.url("/jobs"), params={"limit": 200}).json():
        if not finished(j):
            requests.delete(app.url(f"/jobs/{j['id']}"))
    deadline = time.monotonic() + timeout
    while not all(finished(j) for j in requests.get(app.url("/jobs")).json()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
