"""Synchronous OpenAI and A1111 requests: one job per image, and a twin joining the first's jobs."""

import contextlib
import functools
import secrets
import time

from core.request_context import current_surface
from imagegen import metrics
from imagegen.backend import Backend
from imagegen.errors import BatchTimeout, JobCancelled, JobFinished
from imagegen.generation.images import ImageRecord
from imagegen.generation.job_board import FINISHED, JobState, JobView
from imagegen.generation.requests import SEED_MAX, GenerationRequest
from imagegen.generation.shared_runs import SharedRun
from imagegen.services.admission import KeyQuota
from imagegen.services.inputs import _prunes_refused_inputs
from imagegen.services.jobs import (
    _failure,
    _image,
    _joinable,
    _refuse_past_timeout,
    _run_key,
    _views,
)


def _nth_seed(request: GenerationRequest, index: int) -> GenerationRequest:
    """seed, seed+1, ... when a seed is given (wrapping at SEED_MAX); else each job draws its
    own."""
    if request.seed is None or index == 0:
        return request
    return request.model_copy(update={"seed": (request.seed + index) % (SEED_MAX + 1)})


def _submit_batch(
    backend: Backend,
    request: GenerationRequest,
    job_ids: list[str],
    client: str,
    timeout: float | None,
    quota: KeyQuota,
) -> None:
    """Queues every job, or none.

    Refused whole when they cannot all finish within `timeout`. When the queue or the key's
    limit fills part-way, the queued ones are cancelled and never run."""
    _refuse_past_timeout(backend, request, len(job_ids), timeout)
    jobs_queue, batch, jobs = backend.jobs, secrets.token_hex(8), []
    try:
        for index, job_id in enumerate(job_ids):
            request_n = _nth_seed(request, index)
            jobs_queue.submit(
                request_n, owner=client, batch=batch, job_id=job_id, key=quota.key_name,
                key_limit=quota.limit,
            )  # fmt: skip
            metrics.JOBS_SUBMITTED.labels(surface=current_surface()).inc()
            jobs.append(job_id)
    except Exception:  # the queue filled up, the model went away, the store stopped answering
        # Every job tried, the failing one too: the store may have taken it and lost its answer. A
        # cancel the store cannot take is given up; the request's error is the answer.
        for job_id in job_ids[: len(jobs) + 1]:
            with contextlib.suppress(Exception):
                jobs_queue.cancel(job_id)
        raise


def _join_or_submit(
    backend: Backend,
    run_key: str,
    request: GenerationRequest,
    count: int,
    client: str,
    timeout: float | None,
    quota: KeyQuota,
    *,
    keyed: bool,
) -> SharedRun:
    """A twin's run is joined whatever its estimate; a new one is estimated first."""

    def submit(job_ids: list[str]) -> None:
        _submit_batch(backend, request, job_ids, client, timeout, quota)

    if keyed:  # as POST /generate's key (_keyed_job): a retry joins its twin, even finished
        return backend.runs.join_or_submit(
            run_key,
            submit=submit,
            unfinished=functools.partial(_joinable, backend),
            count=count,
            keep=True,
        )
    return backend.runs.join_or_submit(
        run_key,
        submit=submit,
        unfinished=lambda jobs: any(_unfinished(backend, job_id) for job_id in jobs),
        count=count,
    )


def _unfinished(backend: Backend, job_id: str) -> bool:
    """A job forgotten meanwhile counts as finished: the request queues anew."""
    job = backend.jobs.lookup(job_id)
    return job is not None and job.state not in FINISHED


def _wait(backend: Backend, job_ids: list[str], timeout: float | None, *, partial: bool) -> None:
    """Until every job is done, one fails, or (unless `partial`) one is cancelled."""
    deadline = None if timeout is None else time.monotonic() + timeout
    for job_id in job_ids:
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        job = backend.jobs.wait(job_id, remaining)
        if job is None or job.state not in FINISHED or job.state is JobState.FAILED:
            return
        if job.state is JobState.CANCELLED and not partial:
            return


def _cancel_unfinished(backend: Backend, jobs: list[JobView]) -> list[str]:
    """Returns the cancelled ids."""
    cancelled = []
    for job in jobs:
        if job.state not in FINISHED:
            with contextlib.suppress(JobFinished):  # it may have finished just now
                backend.jobs.cancel(job.id)
                cancelled.append(job.id)
    return cancelled


@_prunes_refused_inputs
def generation_run_shared(
    backend: Backend,
    *,
    request: GenerationRequest,
    count: int,
    client: str,
    idempotency_key: str | None,
    timeout: float | None,
    partial: bool = False,
    key_name: str | None = None,
    key_limit: int | None = None,
) -> list[ImageRecord]:
    """A synchronous request for `count` images: one ordinary job per image, in the one queue.

    Clients of these protocols retry when they stop waiting. A twin joins the first's jobs and
    gets the same images (docs/protocols.md). Giving up cancels jobs only when nobody else
    waits. A job cancelled meanwhile makes the answer 409; with `partial` its image is left
    out, as in A1111."""
    run_key = _run_key(request, count, client, idempotency_key)
    quota = KeyQuota(key_name, key_limit)
    run = _join_or_submit(
        backend, run_key, request, count, client, timeout, quota, keyed=bool(idempotency_key)
    )
    try:
        _wait(backend, run.jobs, timeout, partial=partial)
    finally:
        last = backend.runs.leave(run)
    jobs = _views(backend, run.jobs)
    failed = next((job for job in jobs if job.state is JobState.FAILED), None)
    cancelled = any(job.state is JobState.CANCELLED for job in jobs)
    if failed is not None or (cancelled and not partial):
        if last:
            _cancel_unfinished(backend, jobs)
        raise _failure(failed) if failed else JobCancelled()
    if not all(job.state in FINISHED for job in jobs):  # the timeout
        if not last:
            raise BatchTimeout([j.id for j in jobs if j.state not in FINISHED], cancelled=False)
        if stopped := _cancel_unfinished(backend, jobs):
            raise BatchTimeout(stopped, cancelled=True)
        jobs = _views(backend, run.jobs)  # every one finished just now
    return [_image(job) for job in jobs if job.state is JobState.SUCCEEDED]
