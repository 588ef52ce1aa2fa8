"""Reads of the image service: the model's state, jobs and stored images. Routes of every
protocol call these; they raise imagegen.errors for what does not exist."""

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from imagegen.errors import ImageNotFound, JobNotFound
from imagegen.generation.images import ImageRecord, is_image_id
from imagegen.generation.jobs import JobView, get_jobs
from imagegen.model.loader import ModelStatus, get_loader


@dataclass(frozen=True)
class ImagePage:
    items: list[ImageRecord]
    next: str | None  # the next page's path, newest first; None on the last


def model_status() -> ModelStatus:
    return get_loader().status()


def generation_rules() -> dict[str, Any]:
    """The defaults and caps a generation request meets here (GET /api shows them, so a
    client can see which model preset applies without sending a request)."""
    rules = asdict(get_jobs().rules)
    rules["schedulers"] = sorted(rules["schedulers"]) if rules["schedulers"] else None
    return rules


def job_get(*, job_id: str) -> JobView:
    jobs = get_jobs()
    job = jobs.get(job_id)
    if job is None:
        raise JobNotFound()
    return jobs.view(job)


def job_list(*, limit: int) -> list[JobView]:
    jobs = get_jobs()
    return [jobs.view(job) for job in jobs.recent(limit)]


def image_get(*, image_id: str) -> ImageRecord:
    record = get_jobs().store.get(image_id)
    if record is None:
        raise ImageNotFound()
    return record


def image_png(*, image_id: str) -> Path:
    path = get_jobs().store.png_path(image_id)
    if not is_image_id(image_id) or not path.is_file():
        raise ImageNotFound()
    return path


def image_page(*, limit: int, before: str | None) -> ImagePage:
    records = get_jobs().store.page(limit=limit, before=before)
    more = len(records) == limit
    return ImagePage(
        items=records,
        next=f"/images?limit={limit}&before={records[-1].id}" if more else None,
    )
