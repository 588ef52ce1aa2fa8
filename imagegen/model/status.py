"""A model's readiness as clients read it, and the calls that move it.

Both handles, the process's loader and distributed mode's shared model, answer with it. So the
type lives here, below both."""

from enum import StrEnum
from typing import Protocol

from pydantic import BaseModel, Field


class State(StrEnum):
    NOT_STARTED = "not_started"
    DOWNLOADING = "downloading"
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"


def describe(exc: BaseException) -> str:
    first_line = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first_line}" if first_line else type(exc).__name__


class DownloadBytes(BaseModel):
    bytes_done: int
    bytes_total: int


class AdapterView(BaseModel):
    repo: str
    file: str
    scale: float


class DecoderView(BaseModel):
    kind: str = Field(description="full: the pipeline's own VAE; tiny: a tiny autoencoder")
    repo: str | None = Field(
        description="the tiny decoder's hub repo; null for full, or while the default "
        "(chosen from the pipeline's type at the pull) is not known yet"
    )


class InpaintView(BaseModel):
    """The inpainting checkpoint (INPAINT_MODEL_ID), when one is configured."""

    model_id: str
    revision: str
    commit: str | None = Field(description="its commit on the share, when the copy is complete")
    state: str = Field(
        description="not_on_share (a pull fetches it), on_share (this process runs the base "
        "model's UNet now, and swaps this one in for an inpainting), or loaded (its UNet is "
        "the one in this process's memory now)"
    )


class WorkerModel(BaseModel):
    """One Celery worker process's own model state (distributed mode)."""

    name: str
    state: str = Field(description="not_started, loading, ready or failed: this worker's")
    error: str | None
    job: str | None = Field(description="the job it runs; null when idle")
    models: list[str] = Field(default=[], description="the models it holds in memory now")
    worker_models: list[str] = Field(
        default=[], description="the models it may run (WORKER_MODELS: every offered one unset)"
    )
    loads: dict[str, int] = Field(default={}, description="its loads so far, by model")
    swaps: dict[str, int] = Field(
        default={}, description="its loads that freed another model first, by model"
    )


class ModelStatus(BaseModel):
    """The contract's model status (state, device, model_path) plus what an operator needs.

    GET /model/status answers it as it is."""

    state: str = Field(description="not_started, downloading, loading, ready or failed")
    device: str
    model_path: str
    model_id: str
    revision: str
    variant: str | None
    commit: str | None = Field(description="the commit on the share, when complete")
    weights_on_share: bool
    error: str | None
    download: DownloadBytes
    adapters: list[AdapterView] = Field(
        description="LoRA adapters (MODEL_ADAPTERS) fused into the weights at load, in order"
    )
    decoder: DecoderView = Field(description="the decoder this process loads (VAE_DECODER)")
    inpaint: InpaintView | None = Field(
        default=None,
        description="the inpainting checkpoint whose UNet runs every edit with a mask "
        "(INPAINT_MODEL_ID); null when none is configured: the base model's UNet inpaints",
    )
    # Absent, not null, in the in-process mode: its answers keep the contract's shape.
    workers: list[WorkerModel] | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="distributed mode only (JOB_BROKER_URL): every live worker process; "
        "`state` above is then ready when at least one of them is",
    )
    store: str | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="distributed mode only: `reachable`, or `unreachable` when the job store "
        "(Redis) did not answer in time; `state` and `workers` are then what this process last "
        "saw, `store_age_seconds` ago, and the answer is still 200",
    )
    store_age_seconds: float | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="distributed mode only: how old `state` and `workers` are (0 when read "
        "now); since the store last answered, or since this process started when it never has",
    )


class ModelHandle(Protocol):
    """What the model routes and a job's submission act on.

    mypy checks ModelLoader and SharedModel against it where the Backend holds them."""

    def pull(self) -> bool:
        """Starts acquiring and loading the model; False when it is ready already."""

    def status(self) -> ModelStatus: ...

    def check_loadable(self) -> None:
        """Refuses at once (a ServiceError) what cannot be loaded soon; starts nothing."""
