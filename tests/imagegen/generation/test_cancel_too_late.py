"""A cancel that comes after the job ended, in process on the real tiny pipeline: a 409 whose
message reads as English for each final state."""

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import Client

from imagegen.generation.jobs import JobFinished, JobQueue
from imagegen.model.loader import ModelLoader
from tests.support.loaders import pulled_loader, serve


@pytest.fixture(scope="module")
def loader(hub_root: Path, tmp_path_factory: pytest.TempPathFactory) -> ModelLoader:
    return pulled_loader(hub_root, tmp_path_factory.mktemp("cancel-too-late"))


@pytest.fixture
def queue(loader, tmp_path, monkeypatch) -> Iterator[JobQueue]:
    jobs = serve(loader, tmp_path / "images", monkeypatch)
    yield jobs
    for job in jobs.unfinished():
        with contextlib.suppress(JobFinished):
            jobs.cancel(job.id)
        jobs.wait(job.id, 60)


def test_cancelling_an_ended_job_says_how_it_ended(queue):
    fields = {"prompt": "a cat", "steps": "1", "size": "64x64", "async": "true"}
    done = Client().post("/generate", fields).json()["id"]
    assert queue.wait(done, 60).state == "succeeded"
    late = Client().delete(f"/jobs/{done}")
    assert late.status_code == 409
    assert late.json()["error"]["message"] == (
        "The job has already succeeded; there is nothing to cancel"
    )

    fields["steps"] = "100"  # long enough to be cancelled before it ends
    long = Client().post("/generate", fields).json()["id"]
    assert Client().delete(f"/jobs/{long}").status_code == 200
    queue.wait(long, 60)
    again = Client().delete(f"/jobs/{long}")
    assert again.status_code == 409
    assert again.json()["error"]["message"] == (
        "The job was already cancelled; there is nothing to cancel"
    )
