"""A generation's job: submitted, waited for, cancelled.

A synchronous request past its timeout's estimate is refused at once. A retry with an
Idempotency-Key joins the job its first attempt queued."""

import contextlib
import functools
import hashlib
import secrets

from django.conf import settings

from core.errors import ServiceError
from core.request_context import current_surface
from imagegen import metrics, selectors
from imagegen.backend import Backend
from imagegen.errors import (
    BatchTimeout,
    JobCancelled,
    JobFailed,
    JobFinished,
    PastSyncTimeout,
    SyncTimeout,
)
from imagegen.generation.images import ImageRecord
from imagegen.generation.job_board import FINISHED, JobState, JobView
from imagegen.generation.requests import GenerationRequest
from imagegen.services.admission import KeyQuota
from imagegen.services.inputs import _prunes_refused_inputs


@_prunes_refused_inputs
def generation_submit(
    backend: Backend,
    *,
    request: GenerationRequest,
    job_id: str | None = None,
    client: str | None = None,
    key_name: str | None = None,
    key_limit: int | None = None,
) -> JobView:
    """Queues a generation, or refuses it at once.

    `job_id` is chosen beforehand by a keyed run. A protocol `client` sees it in /progress."""
    batch = None if client is None else secrets.token_hex(8)
    job = backend.jobs.submit(
        request, job_id=job_id, owner=client, batch=batch, key=key_name, key_limit=key_limit
    )
    metrics.JOBS_SUBMITTED.labels(surface=current_surface()).inc()
    return job


def _failure(job: JobView) -> ServiceError:
    return job.failure or JobFailed(job.error)


def _image(job: JobView) -> ImageRecord:
    """A succeeded job's image, which every board sets with the state."""
    assert job.image is not None, f"job {job.id} succeeded without its image"
    return job.image


def generation_result(backend: Backend, *, job: JobView, timeout: float | None) -> ImageRecord:
    """Waits for the job's image. At the timeout nobody will collect it, so the job is cancelled.

    A job that finished meanwhile still answers with its image."""
    return _answer(backend, backend.jobs.wait(job.id, timeout) or job, alone=True)


def _answer(backend: Backend, job: JobView, *, alone: bool) -> ImageRecord:
    """An unfinished job (the timeout) is cancelled when nobody else (`alone`) waits for it."""
    jobs = backend.jobs
    if job.state not in FINISHED:
        if not alone:
            raise BatchTimeout([job.id], cancelled=False)
        with contextlib.suppress(JobFinished):  # it may have finished just now
            jobs.cancel(job.id)
        job = jobs.lookup(job.id) or job
        if job.state not in FINISHED or job.state is JobState.CANCELLED:
            raise SyncTimeout(job.id)
    if job.state is JobState.CANCELLED:
        raise JobCancelled()
    if job.state is JobState.FAILED:
        raise _failure(job)
    return _image(job)  # neither queued, running, cancelled nor failed: succeeded


def _refuse_past_timeout(
    backend: Backend, request: GenerationRequest, count: int, timeout: float | None
) -> None:
    """Refuses now, with nothing queued, past GEN_SYNC_REFUSE_FACTOR x `timeout`.

    Better than a 504 minutes later. With nothing measured, nothing is refused."""
    if timeout is None or not settings.GEN_SYNC_REFUSE_FACTOR:  # 0: none refused, none asked
        return
    verdict = selectors.generation_estimate(backend, request=request, count=count, timeout=timeout)
    if verdict.refused:
        raise PastSyncTimeout(verdict.message)


@_prunes_refused_inputs
def generation_run(
    backend: Backend,
    *,
    request: GenerationRequest,
    timeout: float | None,
    client: str = "",
    idempotency_key: str | None = None,
    key_name: str | None = None,
    key_limit: int | None = None,
) -> tuple[JobView, ImageRecord]:
    """A synchronous generation: a job like any other, then waited for.

    Refused at once when it cannot finish in time."""
    if idempotency_key is not None:
        job, last = _keyed_job(
            backend, request, timeout, client, idempotency_key, KeyQuota(key_name, key_limit),
            wait=True,
        )  # fmt: skip
        return job, _answer(backend, job, alone=last)
    _refuse_past_timeout(backend, request, 1, timeout)
    job = generation_submit(backend, request=request, key_name=key_name, key_limit=key_limit)
    return job, generation_result(backend, job=job, timeout=timeout)


@_prunes_refused_inputs
def generation_submit_waited(
    backend: Backend,
    *,
    request: GenerationRequest,
    timeout: float,
    key_name: str | None = None,
    key_limit: int | None = None,
) -> JobView:
    """For a caller that waits itself (an MCP tool reporting progress), refused as generation_run
    is."""
    _refuse_past_timeout(backend, request, 1, timeout)
    return generation_submit(backend, request=request, key_name=key_name, key_limit=key_limit)


@_prunes_refused_inputs
def generation_waited_result(
    backend: Backend, *, request: GenerationRequest, job: JobView, timeout: float
) -> ImageRecord:
    """An edit that ends without its image leaves no input behind, as in generation_run."""
    return generation_result(backend, job=job, timeout=timeout)


@_prunes_refused_inputs
def generation_submit_keyed(
    backend: Backend,
    *,
    request: GenerationRequest,
    client: str,
    idempotency_key: str,
    key_name: str | None = None,
    key_limit: int | None = None,
) -> JobView:
    """An asynchronous POST /generate with an Idempotency-Key: a retry answers the first job."""
    quota = KeyQuota(key_name, key_limit)
    return _keyed_job(backend, request, None, client, idempotency_key, quota, wait=False)[0]


def _keyed_job(
    backend: Backend,
    request: GenerationRequest,
    timeout: float | None,
    client: str,
    idempotency_key: str,
    quota: KeyQuota,
    *,
    wait: bool,
) -> tuple[JobView, bool]:
    """The first request with an Idempotency-Key queues the job; a retry joins it on any replica.

    The rules: docs/image-api.md, "Retrying safely". Also answers whether no other attempt
    waits: only then may the timeout cancel the job."""
    run_key = _run_key(request, 1, client, f"generate:{idempotency_key}")

    def submit(job_ids: list[str]) -> None:
        if wait:
            _refuse_past_timeout(backend, request, 1, timeout)
        generation_submit(
            backend,
            request=request,
            job_id=job_ids[0],
            key_name=quota.key_name,
            key_limit=quota.limit,
        )

    runs = backend.runs
    joinable = functools.partial(_joinable, backend)
    run = runs.join_or_submit(run_key, submit=submit, unfinished=joinable, keep=True)
    try:
        job = _views(backend, run.jobs)[0]
        if wait:
            job = backend.jobs.wait(job.id, timeout) or job
    finally:
        last = runs.leave(run)
    return job, last


def _joinable(backend: Backend, job_ids: list[str]) -> bool:
    """None failed, was cancelled or was forgotten; otherwise a retry queues anew."""
    jobs = backend.jobs
    views = [jobs.lookup(job_id) for job_id in job_ids]
    return all(
        view is not None and view.state not in (JobState.FAILED, JobState.CANCELLED)
        for view in views
    )


def _run_key(
    request: GenerationRequest, count: int, client: str, idempotency_key: str | None
) -> str:
    what = (
        f"key:{idempotency_key}" if idempotency_key else f"body:{count}:{request.model_dump_json()}"
    )
    return hashlib.sha256(f"{client}\n{what}".encode()).hexdigest()


def job_cancel(backend: Backend, *, job_id: str, seen_by: str | None = None) -> JobView:
    selectors.job_get(backend, job_id=job_id, seen_by=seen_by)  # another key's: 404
    job = backend.jobs.cancel(job_id)
    if job is None:
        raise backend.job_not_found()
    return job


def generation_interrupt(backend: Backend, *, client: str, running_only: bool = False) -> list[str]:
    """A1111's interrupt cancels this client's unfinished jobs; skip, only its running one.

    Never another client's. Returns their ids."""
    jobs = backend.jobs
    stopped = []
    for job in selectors.client_jobs(backend, client=client):
        if job.state in FINISHED or (running_only and job.state is not JobState.RUNNING):
            continue
        with contextlib.suppress(JobFinished):
            jobs.cancel(job.id)
            stopped.append(job.id)
    return stopped


def _views(backend: Backend, job_ids: list[str]) -> list[JobView]:
    """A job forgotten meanwhile (JOBS_KEEP) counts as failed."""
    jobs = backend.jobs
    return [jobs.lookup(job_id) or _forgotten(job_id) for job_id in job_ids]


def _forgotten(job_id: str) -> JobView:
    raise JobFailed(f"job {job_id} is no longer known")
