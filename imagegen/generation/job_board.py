"""What a job is to its clients, and the calls every job board answers.

Two boards implement JobBoard: the in-process queue (imagegen.generation.jobs), whose worker
thread runs the jobs, and the distributed one (imagegen.distributed.board), whose jobs live in
Redis and run on Celery workers. Services, selectors and routes hold a JobBoard and never ask
which one it is: imagegen.backend chooses once, from JOB_BROKER_URL. So the types both boards
answer with live here, below both, and each rule a client can see (what progress and the ETA
are) is computed here once.
"""

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from core.errors import ServiceError
from imagegen.generation.estimates import Ahead, Estimate
from imagegen.generation.images import ImageRecord
from imagegen.generation.presets import GenerationRules
from imagegen.generation.previews import Preview
from imagegen.generation.requests import GenerationRequest


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


FINISHED = {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}
# The phase of a running job asked to stop: it stays `running` until the model's next block
# (imagegen.generation.stop_points) ends it, within seconds.
CANCELLING = "cancelling: stops at the model's next block"


class JobProgress(BaseModel):
    model_config = ConfigDict(frozen=True)

    step: int
    steps: int = Field(description="0 until the job starts denoising")
    fraction: float
    elapsed_seconds: float | None
    eta_seconds: float | None


def job_progress(
    *,
    state: JobState,
    step: int,
    steps: int,
    started_at: datetime | None,
    finished_at: datetime | None,
    now: datetime,
    denoise_seconds: float | None,
) -> JobProgress:
    """A job's progress as every board reports it. `denoise_seconds` is how long it has been
    denoising (each board keeps its own clock for that); the ETA is the remaining steps at
    the mean pace of the steps done."""
    elapsed = None
    if started_at is not None:
        elapsed = round(((finished_at or now) - started_at).total_seconds(), 3)
    eta = None
    if state is JobState.RUNNING and step and denoise_seconds is not None:
        eta = round(denoise_seconds / step * (steps - step), 3)
    return JobProgress(
        step=step,
        steps=steps,
        fraction=round(step / steps if steps else 0.0, 4),
        elapsed_seconds=elapsed,
        eta_seconds=eta,
    )


@dataclass(frozen=True)
class JobView:
    """A job as one consistent picture (state, position and progress read together): what
    every route answers about a job."""

    id: str
    state: JobState
    position: int | None  # 1 = runs next; None unless queued
    phase: str
    progress: JobProgress
    parameters: GenerationRequest
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None
    image: ImageRecord | None
    # Not answered as such (JobOut picks its fields): who submitted it and with which others
    # (the protocol routes' lookups), and the error a synchronous request raises for it.
    owner: str | None = None
    batch: str | None = None
    key: str | None = None  # the API key that submitted it (apikeys.auth); None when open
    failure: ServiceError | None = None
    # Grows with every change a client can see (state, phase, position, each step, each
    # preview), for waiting on changes (wait_change).
    revision: int = 0
    # The X-Request-ID of the request that queued it (core.request_context).
    request_id: str | None = None
    # The step of the latest preview (0: none yet); its image is read apart (JobBoard.preview),
    # so a list of jobs never carries images.
    preview_step: int = 0


def ahead_of(view: JobView) -> Ahead | None:
    """What a job leaves to do before a request submitted now (imagegen.generation.estimates):
    all of it while it waits, its steps to go and its decode while it runs; nothing once it is
    stopping (within a block) or finished."""
    if view.state is JobState.QUEUED:
        return Ahead(view.parameters)
    if view.state is JobState.RUNNING and view.phase != CANCELLING:
        return Ahead(view.parameters, steps_done=view.progress.step)
    return None


class JobBoard(Protocol):
    """The job calls of a web process, in either job mode. mypy checks both boards (JobQueue,
    RedisJobBoard) against it where the Backend (imagegen.backend) holds them."""

    @property
    def rules(self) -> GenerationRules:
        """The defaults and bounds a request meets here (the configured model's preset)."""

    def submit(
        self,
        request: GenerationRequest,
        *,
        owner: str | None = None,
        batch: str | None = None,
        job_id: str | None = None,
        key: str | None = None,
        key_limit: int | None = None,
    ) -> JobView:
        """Queues a generation, or refuses it at once with nothing queued (ServiceError).
        `job_id`: an id chosen before (imagegen.generation.shared_runs), else a new one.
        `key`: the API key it belongs to (its own jobs and images). `key_limit`: the key's
        --max-queued, counted in the step that queues the job (KeyQueueLimit when `key` has
        that many queued or running already), so requests of one key at the same instant
        cannot pass it together, on any replica."""

    def estimate(self, request: GenerationRequest, *, count: int = 1) -> Estimate | None:
        """How long `count` images of `request` would take if submitted now, the jobs ahead
        included, from what the workers measured; None while nothing is measured."""

    def lookup(self, job_id: str) -> JobView | None: ...

    def recent(self, limit: int) -> list[JobView]:
        """Newest first."""

    def unfinished(self) -> list[JobView]:
        """Every job queued or running, newest first, however many newer ones finished
        since (what the page's Queue panel follows)."""

    def client_jobs(self, client: str) -> list[JobView]:
        """The jobs `client`'s protocol requests submitted, oldest first."""

    def wait(self, job_id: str, timeout: float | None) -> JobView | None:
        """The job's view once it has finished, or as it is when `timeout` runs out."""

    def wait_change(self, job_id: str, after: int, timeout: float) -> JobView | None:
        """The view as soon as its revision passes `after`, or as it is at `timeout`."""

    def cancel(self, job_id: str) -> JobView | None:
        """None for an unknown job; raises JobFinished for a finished one."""

    def preview(self, job_id: str, partial: int | None = None) -> Preview | None:
        """The job's latest preview, or its partial image number `partial` (an OpenAI
        stream's); None before it is made, or for an unknown job."""
