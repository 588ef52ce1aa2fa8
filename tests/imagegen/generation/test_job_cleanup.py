"""What the in-process queue's worker does after a job, called in-process on the real tiny
pipeline: a full garbage collection (a quarter of a second with SD 1.5 loaded, while every
thread of the process waits for it) only after a job that failed or was cancelled."""

import gc
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import override_settings

from imagegen.backend import rules_from_settings
from imagegen.generation.images import ImageStore
from imagegen.generation.job_board import FINISHED
from imagegen.generation.jobs import JobQueue
from imagegen.generation.requests import GenerationRequest
from tests.support.loaders import new_loader, wait_for


@pytest.fixture
def full_collections() -> Iterator[list[str]]:
    """The threads that ran a full collection, with automatic collection off meanwhile (so
    only explicit ones count)."""
    seen: list[str] = []

    def record(phase: str, info: dict) -> None:
        if phase == "start" and info["generation"] == 2:
            seen.append(threading.current_thread().name)

    gc.disable()
    gc.callbacks.append(record)
    yield seen
    gc.callbacks.remove(record)
    gc.enable()


@pytest.fixture
def queue(hub, share: Path, tmp_path: Path) -> JobQueue:
    loader = new_loader(hub, share, tmp_path / "cache")
    assert loader.pull()
    assert wait_for(loader, {"ready", "failed"}) == "ready"
    # The rules of a process configured with this loader's model (no preset: no step cap).
    with override_settings(MODEL_ID=loader.source.model_id, MODEL_ADAPTERS=()):
        rules = rules_from_settings()
    return JobQueue(
        loader, ImageStore(tmp_path / "images"), queue_max=2, load_timeout=60, keep=10,
        rules=rules,
    )  # fmt: skip


def run(queue: JobQueue, request: GenerationRequest, *, cancel_after: float | None = None) -> str:
    job_id = queue.submit(request).id
    deadline = time.monotonic() + 120
    if cancel_after is not None:
        while (state := queue.get(job_id).state.value) != "running":
            assert state == "queued" and time.monotonic() < deadline, state
            time.sleep(0.01)
        time.sleep(cancel_after)
        queue.cancel(job_id)
    while (job := queue.get(job_id)).state not in FINISHED:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return job.state.value


def wait_for_one(collections: list[str]) -> None:
    """The worker collects after marking the job finished: give it a moment to start."""
    deadline = time.monotonic() + 10
    while not collections and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_full_collection_follows_a_failed_job(queue, full_collections):
    # diffusers refuses a side that is not a multiple of 8 (the routes refuse it earlier)
    odd = GenerationRequest(prompt="an odd one", steps=2, size=(64, 60), seed=3)
    assert run(queue, odd) == "failed"
    wait_for_one(full_collections)
    assert full_collections == ["generation"]


def test_a_full_collection_follows_a_cancelled_job_but_not_a_successful_one(
    queue, full_collections
):
    done = run(queue, GenerationRequest(prompt="a red cube", steps=2, size=(64, 64), seed=1))
    assert done == "succeeded"
    # The worker thread finishes a job's clean-up before it takes the next one, so once the
    # next job runs, a collection after the first would be on the list.
    long = GenerationRequest(prompt="a long one", steps=400, size=(64, 64), seed=2)
    assert run(queue, long, cancel_after=0.3) == "cancelled"
    wait_for_one(full_collections)
    assert full_collections == ["generation"]  # the cancelled job's, and only that one
