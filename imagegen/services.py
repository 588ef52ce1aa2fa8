"""What the image service does on request: pull the model, run generations, cancel them.

Routes of every protocol (the native form API, and the OpenAI and AUTOMATIC1111 adapters and
the page that come next) call these, so each rule (the queue's bound, the synchronous wait
and its timeout, what a finished job answers) lives here once. They raise imagegen.errors,
which config/api.py turns into answers.
"""

import contextlib

from imagegen.errors import JobCancelled, JobFailed, JobFinished, JobNotFound, SyncTimeout
from imagegen.generation.images import ImageRecord
from imagegen.generation.jobs import Job, JobState, JobView, get_jobs
from imagegen.generation.render import GenerationRequest
from imagegen.model.loader import get_loader


def model_pull() -> bool:
    """Starts the download-and-load job unless one runs; False when already ready."""
    return get_loader().pull()


def generation_submit(*, request: GenerationRequest) -> Job:
    """Queues a generation, or refuses it at once (nothing to load, queue full)."""
    return get_jobs().submit(request)


def generation_result(*, job: Job, timeout: float | None) -> ImageRecord:
    """Waits for the job's image. A client that stops waiting (the timeout) has its job
    cancelled, since nobody will collect the image; a job that finished in the meantime
    still answers with its image."""
    if not job.done.wait(timeout):
        with contextlib.suppress(JobFinished):  # it may have finished just now
            get_jobs().cancel(job.id)
        if not job.done.is_set() or job.state is JobState.CANCELLED:
            raise SyncTimeout(job.id)
    if job.state is JobState.CANCELLED:
        raise JobCancelled()
    if job.state is JobState.FAILED:
        raise job.failure or JobFailed(job.error)
    return job.image


def generation_run(*, request: GenerationRequest, timeout: float | None) -> tuple[Job, ImageRecord]:
    """A synchronous generation: submitted as a job like any other, then waited for."""
    job = generation_submit(request=request)
    return job, generation_result(job=job, timeout=timeout)


def job_cancel(*, job_id: str) -> JobView:
    jobs = get_jobs()
    job = jobs.cancel(job_id)
    if job is None:
        raise JobNotFound()
    return jobs.view(job)
