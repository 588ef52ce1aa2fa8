"""GET /jobs and GET /images, in process on the real tiny pipeline: both page in one shape
({items, next}; /jobs on request, its bare list kept for the clients that read it), and an
image's listing item names its PNG as a job does."""

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
    return pulled_loader(hub_root, tmp_path_factory.mktemp("listing-pages"))


@pytest.fixture
def queue(loader, tmp_path, monkeypatch) -> Iterator[JobQueue]:
    jobs = serve(loader, tmp_path / "images", monkeypatch)
    yield jobs
    for job in jobs.unfinished():
        with contextlib.suppress(JobFinished):
            jobs.cancel(job.id)
        jobs.wait(job.id, 60)


def three_images(queue: JobQueue) -> list[str]:
    """The ids of three finished jobs, oldest first."""
    ids = []
    for index in range(3):
        fields = {"prompt": f"page {index}", "steps": "1", "size": "64x64", "async": "true"}
        response = Client().post("/generate", fields)
        assert response.status_code == 202, response.content
        ids.append(response.json()["id"])
        assert queue.wait(ids[-1], 60).state == "succeeded"
    return ids


def test_jobs_page_as_images_do_and_the_bare_list_stays(queue):
    ids = three_images(queue)
    bare = Client().get("/jobs", {"limit": 2}).json()
    assert [job["id"] for job in bare] == ids[::-1][:2]  # as before: a list

    first = Client().get("/jobs", {"limit": 2, "paged": "true"}).json()
    assert [job["id"] for job in first["items"]] == ids[::-1][:2]
    assert first["next"] == f"/jobs?paged=true&limit=2&before={ids[1]}"
    second = Client().get(first["next"]).json()
    assert [job["id"] for job in second["items"]] == [ids[0]]
    assert second["next"] is None  # the last page says so, not an empty one after it

    by_cursor = Client().get("/jobs", {"limit": 5, "before": ids[2]}).json()  # paged implied
    assert [job["id"] for job in by_cursor["items"]] == [ids[1], ids[0]]
    assert by_cursor["next"] is None


def test_a_cursor_of_no_listed_job_gives_an_empty_page_and_a_malformed_one_a_400(queue):
    """A job forgotten (JOBS_KEEP forgets the oldest first) has nothing remembered after it."""
    three_images(queue)
    forgotten = Client().get("/jobs", {"before": "0123456789abcdef"})
    assert forgotten.status_code == 200, forgotten.content
    assert forgotten.json() == {"items": [], "next": None}
    response = Client().get("/jobs", {"before": "not-a-job"})
    assert response.status_code == 400, response.content
    [detail] = response.json()["error"]["details"]
    assert detail["field"] == "before" and "should match pattern" in detail["message"]


def test_an_image_listing_item_names_its_png_as_a_job_does(queue):
    ids = three_images(queue)
    newest = Client().get("/images", {"limit": 1}).json()["items"][0]
    job = Client().get(f"/jobs/{ids[-1]}").json()
    assert newest["id"] == job["image"]["id"]
    assert newest["url"] == job["image_url"] == f"/images/{newest['id']}.png"
    png = Client().get(newest["url"])
    assert png.status_code == 200 and png["Content-Type"] == "image/png"
    assert Client().get(f"/images/{newest['id']}").json()["url"] == newest["url"]
