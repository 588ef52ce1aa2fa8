"""What a job is to its clients, and the calls every job board answers.

Services never ask which board they hold. So the shared types and rules (progress, ETA) live
here, below both."""

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from core.errors import ServiceError
from imagegen.errors import (
    ModelDownloading,
    ModelFailed,
    ModelLoading,
    ModelNotPulled,
    OfferedModelNotPulled,
    naming_model,
)
from imagegen.generation.estimates import Ahead, Estimate
from imagegen.generation.images import ImageRecord
from imagegen.generation.presets import GenerationRules
from imagegen.generation.previews import Preview
from imagegen.generation.requests import GenerationRequest
from imagegen.model.status import ModelHandle


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


FINISHED = {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}
# A job asked to stop stays `running` until the model's next block ends it, within seconds.
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
    """The ETA is the remaining steps at the mean pace of the steps done.

    Each board keeps its own clock for `denoise_seconds`."""
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
    """A job as one consistent picture: what every route answers about a job."""

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
    # Not answered as such: the protocol routes' lookups, and the error a synchronous request
    # raises.
    owner: str | None = None
    batch: str | None = None
    key: str | None = None  # the API key that submitted it (apikeys.auth); None when open
    failure: ServiceError | None = None
    # Grows with every change a client can see, for wait_change.
    revision: int = 0
    # The X-Request-ID of the request that queued it (core.request_context).
    request_id: str | None = None
    # The step of the latest preview (0: none). Its image is read apart, so job lists carry no
    # images.
    preview_step: int = 0


def ahead_of(view: JobView) -> Ahead | None:
    """What a job leaves to do before a request submitted now: all, the rest, or nothing when
    stopping."""
    if view.state is JobState.QUEUED:
        return Ahead(view.parameters)
    if view.state is JobState.RUNNING and view.phase != CANCELLING:
        return Ahead(view.parameters, steps_done=view.progress.step)
    return None


class JobBoard(Protocol):
    """The job calls of a web process, in either mode. mypy checks both boards against it."""

    @property
    def rules(self) -> GenerationRules:
        """The configured model's defaults and bounds."""

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
        """Queues a generation, or refuses it with nothing queued (ServiceError).

        `key_limit` is counted in the step that queues, so one key's simultaneous requests cannot
        pass it on any replica."""

    def estimate(self, request: GenerationRequest, *, count: int = 1) -> Estimate | None:
        """Includes the jobs ahead. None until the workers have measured something."""

    def lookup(self, job_id: str) -> JobView | None: ...

    def recent(self, limit: int) -> list[JobView]:
        """Newest first."""

    def unfinished(self) -> list[JobView]:
        """Every queued or running job, newest first, however many finished since (the page's Queue
        panel)."""

    def client_jobs(self, client: str) -> list[JobView]:
        """Oldest first."""

    def wait(self, job_id: str, timeout: float | None) -> JobView | None:
        """The finished job's view, or its view at `timeout`."""

    def wait_change(self, job_id: str, after: int, timeout: float) -> JobView | None:
        """The view once its revision passes `after`, or at `timeout`."""

    def cancel(self, job_id: str) -> JobView | None:
        """None for an unknown job; raises JobFinished for a finished one."""

    def preview(self, job_id: str, partial: int | None = None) -> Preview | None:
        """The latest preview, or an OpenAI stream's partial image. None before it exists."""


def check_loadable(handle: ModelHandle, model: str | None) -> None:
    """Refuses at submit (409, 503) what would fail as a job later. A model the request named
    (a MODELS entry) is named in the refusal; MODEL_ID's keeps the words it always had."""
    try:
        handle.check_loadable()
    except ModelNotPulled:
        if model is None:
            raise
        raise OfferedModelNotPulled(model) from None
    except (ModelLoading, ModelDownloading, ModelFailed) as exc:
        if model is None:
            raise
        raise naming_model(exc, model) from None
