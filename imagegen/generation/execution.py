"""One job's generation from start to stored image, whoever runs it: the in-process queue's
worker thread (imagegen.generation.jobs) or a Celery worker process (imagegen.distributed).
Both must make the same image, record, timings and outcome from the same request, so the steps
live here once and each runner only says where progress goes (a Report) and where the outcome
is written.
"""

import logging
import time
from dataclasses import dataclass
from typing import Any, Protocol

from core.errors import ServiceError
from imagegen import metrics
from imagegen.errors import ModelLoading
from imagegen.generation.edit_inputs import EditInputs, prepared_inputs
from imagegen.generation.images import GenerationParameters, ImageRecord, ImageStore, png_bytes
from imagegen.generation.job_board import JobState
from imagegen.generation.parameters import resolve, steps_running
from imagegen.generation.previews import (
    DEFAULT_PREVIEWS,
    Preview,
    Previewer,
    PreviewPolicy,
    partial_steps,
)
from imagegen.generation.render import Cancelled, render
from imagegen.generation.requests import GenerationRequest, InpaintModel
from imagegen.model.loader import ModelLoader
from imagegen.model.status import describe

log = logging.getLogger(__name__)

LOAD_WAIT = 0.25  # seconds between a waiting job's looks at its cancel while the model loads


class Report(Protocol):
    """Where a running generation's progress goes, and how it learns to stop. mypy checks
    both (jobs._LocalReport, distributed.worker._StoreReport) where each is passed to run_job."""

    def stop_requested(self) -> bool:
        """Whether the job is to stop. Asked before every stoppable part of the model
        (imagegen.generation.stop_points), hundreds of times a step: a flag read, never a
        round trip; whoever learns of the cancel sets the flag."""

    def denoising(self, steps: int) -> None: ...

    def step(self, done: int, total: int) -> None:
        """After each denoising step; raises Cancelled when the job is to stop there."""

    def phase(self, text: str) -> None: ...

    def preview(self, preview: Preview) -> None:
        """The job's latest preview (imagegen.generation.previews), replacing the last."""


@dataclass(frozen=True)
class Outcome:
    """How a job ended, as both job modes record it."""

    state: JobState
    phase: str
    image: ImageRecord | None = None
    error: str | None = None  # what a client reads
    failure: ServiceError | None = None  # what a synchronous request raises, when known


def run_job(
    *,
    job_id: str,
    loader: ModelLoader,
    store: ImageStore,
    request: GenerationRequest,
    key: str | None = None,
    queued_seconds: float,
    load_timeout: float,
    report: Report,
    previews: PreviewPolicy = DEFAULT_PREVIEWS,
) -> Outcome:
    """Loads the model if this process has not (bounded by `load_timeout`), renders, and
    stores the PNG and its record; every way that can end becomes the job's outcome: a cancel,
    a ServiceError (its message and status kept for the waiting request) or any other error
    (logged here, its first line for the client). Counted here, in either mode: the time it
    waited and ran, each step and the decode (imagegen.metrics); how it ended is counted where
    the outcome is kept (a worker's run found lost keeps none: count_finished)."""
    metrics.QUEUE_SECONDS.observe(queued_seconds)
    started = time.monotonic()
    outcome = _run(
        job_id=job_id, loader=loader, store=store, request=request,
        queued_seconds=queued_seconds, load_timeout=load_timeout, report=report,
        previews=previews, key=key,
    )  # fmt: skip
    metrics.RUN_SECONDS.observe(time.monotonic() - started)
    return outcome


def count_finished(outcome: Outcome) -> None:
    """imagegen_jobs_finished_total, once the outcome is the job's."""
    metrics.JOBS_FINISHED.labels(outcome=outcome.state.value).inc()


def _run(
    *,
    job_id: str,
    loader: ModelLoader,
    store: ImageStore,
    request: GenerationRequest,
    queued_seconds: float,
    load_timeout: float,
    report: Report,
    previews: PreviewPolicy,
    key: str | None,
) -> Outcome:
    try:
        started = time.monotonic()
        pipe: Any = _loaded(loader, load_timeout, report)
        # The inpainting checkpoint's UNet for an inpainting, when one is configured; else
        # the base's (either may have to be swapped in: imagegen.model.unets).
        inpainting = request.edit is not None and request.edit.mask is not None
        if report.stop_requested():  # a swap, once begun, runs to its end as a load does
            raise Cancelled()
        ran = loader.use_unet(inpaint=inpainting)
        if report.stop_requested():
            raise Cancelled()
        model_wait = time.monotonic() - started
        parameters = resolve(
            pipe, request, model_id=loader.source.model_id, revision=loader.loaded_commit,
            inpaint_model=None if ran is None else InpaintModel(
                model_id=ran.repo, revision=ran.commit
            ),
        )  # fmt: skip
        edit = _edit_inputs(store, request, parameters)
        steps = steps_running(parameters)
        report.denoising(steps)
        denoise_started = time.monotonic()
        device = "cpu" if request.force_cpu else loader.device
        previewer = Previewer(pipe, previews, partial_steps(request.partial_images, steps))

        def on_latents(latents: Any, done: int, total: int) -> None:
            if (preview := previewer.make(latents, done, total)) is not None:
                report.preview(preview)

        rendered = render(
            pipe, parameters, scheduler=request.scheduler, device=device, home=loader.device,
            on_step=report.step, stop_requested=report.stop_requested, edit=edit,
            on_latents=on_latents if previews.on else None,
        )  # fmt: skip
        generation = time.monotonic() - denoise_started
        worked = (parameters.width, parameters.height)  # "only masked": its cut-out's
        if parameters.edit is not None and parameters.edit.only_masked is not None:
            worked = parameters.edit.only_masked.size
        size = metrics.image_size(*worked)
        for seconds in rendered.step_seconds:
            metrics.STEP_SECONDS.labels(size=size).observe(seconds)
        metrics.DECODE_SECONDS.labels(size=size).observe(rendered.stages["decode_seconds"])
        report.phase("saving")
        encoding = time.monotonic()
        png = png_bytes(rendered.image, parameters)
        timings = {
            "queued_seconds": queued_seconds,
            "model_wait_seconds": model_wait,
            "generation_seconds": generation,
            **rendered.stages,
            "png_seconds": time.monotonic() - encoding,
        }
        image = store.save(png, parameters, device=device, timings=timings, key=key)
        return Outcome(JobState.SUCCEEDED, "done", image=image)
    except Cancelled:
        return Outcome(JobState.CANCELLED, "cancelled while running")
    except ServiceError as error:
        return Outcome(JobState.FAILED, "failed", error=error.message, failure=error)
    except Exception as error:
        log.exception("job %s failed", job_id)
        return Outcome(JobState.FAILED, "failed", error=describe(error))


def _loaded(loader: ModelLoader, timeout: float, report: Report) -> Any:
    """The loaded pipeline, waited for in slices of LOAD_WAIT: a job cancelled meanwhile
    stops at once, not when the load ends (a load runs on for the jobs behind it, and the
    cancel bound, imagegen.generation.stop_points, holds for a job waiting for it too)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return loader.pipeline(min(LOAD_WAIT, max(0.0, deadline - time.monotonic())))
        except ModelLoading:
            if report.stop_requested():
                raise Cancelled() from None
            if time.monotonic() >= deadline:
                raise


def _edit_inputs(
    store: ImageStore, request: GenerationRequest, parameters: GenerationParameters
) -> EditInputs | None:
    """An edit's inputs, read from the store (the share, for a worker) where the request
    put them before queueing; None for text-to-image."""
    edit = request.edit
    if edit is None:
        return None
    mask = None if edit.mask is None else store.read_input(edit.mask)
    return prepared_inputs(
        store.read_input(edit.source), mask, size=(parameters.width, parameters.height),
        steps=parameters.steps, edit=edit,
    )  # fmt: skip
