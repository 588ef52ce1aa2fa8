"""One job from start to stored image, in process or on a Celery worker.

Both must make the same image, record and outcome, so the steps live here once."""

import logging
import time
from dataclasses import dataclass
from typing import Any, Protocol

from core.errors import ServiceError
from imagegen import metrics
from imagegen.errors import ModelLoading
from imagegen.generation.edit_inputs import EditInputs, prepared_inputs
from imagegen.generation.hires_render import HiresRun
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
from imagegen.generation.upscale import Upscaling, run_upscale, tile_budget
from imagegen.model.loader import ModelLoader
from imagegen.model.memory import weights_bytes
from imagegen.model.status import describe

log = logging.getLogger(__name__)

LOAD_WAIT = 0.25  # seconds between a waiting job's looks at its cancel while the model loads


class Report(Protocol):
    """Where progress goes, and how a generation learns to stop. mypy checks both reports."""

    def stop_requested(self) -> bool:
        """Asked hundreds of times a step, so a flag read, never a round trip."""

    def denoising(self, steps: int) -> None: ...

    def step(self, done: int, total: int) -> None:
        """After each step; raises Cancelled when the job is to stop."""

    def phase(self, text: str) -> None: ...

    def preview(self, preview: Preview) -> None:
        """Replaces the last preview."""


@dataclass(frozen=True)
class Outcome:
    """How a job ended, as both modes record it."""

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
    upscaling: Upscaling | None = None,
) -> Outcome:
    """Loads the model if needed, renders, and stores the PNG and record; an upscale runs
    its upscaler instead (`upscaling`), no model loaded.

    Every ending becomes the outcome: cancel, ServiceError (message and status kept), or any
    other error (logged; its first line for the client)."""
    metrics.QUEUE_SECONDS.observe(queued_seconds)
    started = time.monotonic()
    outcome = _run(
        job_id=job_id, loader=loader, store=store, request=request,
        queued_seconds=queued_seconds, load_timeout=load_timeout, report=report,
        previews=previews, key=key, upscaling=upscaling,
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
    upscaling: Upscaling | None = None,
) -> Outcome:
    try:
        if request.upscale is not None:
            if upscaling is None:
                raise ServiceError("this job runner runs no upscales")
            image = run_upscale(
                store=store, request=request, upscaling=upscaling, report=report, key=key,
                queued_seconds=queued_seconds,
            )  # fmt: skip
            return Outcome(JobState.SUCCEEDED, "done", image=image)
        started = time.monotonic()
        pipe: Any = _loaded(loader, load_timeout, report)
        # The inpainting checkpoint's UNet for an inpainting, if configured; else the base's.
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
        hires = None
        if parameters.hires is not None:
            report.phase("first pass")
            budget = (upscaling.budget() if upscaling is not None
                      else tile_budget(0, weights_bytes(pipe.components.values())))  # fmt: skip
            offered = None if upscaling is None else upscaling.offered
            hires = HiresRun(parameters.hires, offered, report.phase, budget)
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
            loras=[(loader.source.model_dir / u.path, u.weight) for u in request.loras],
            hires=hires,
        )  # fmt: skip
        generation = time.monotonic() - denoise_started
        worked = (parameters.width, parameters.height)  # "only masked": its cut-out's
        if parameters.edit is not None and parameters.edit.only_masked is not None:
            worked = parameters.edit.only_masked.size
        size = metrics.image_size(*worked)
        # A hires fix's second pass runs at another size: its steps are not this size's.
        for seconds in rendered.step_seconds[: parameters.steps if hires else None]:
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
    """Waits for the load in slices of LOAD_WAIT, so a cancel stops the job at once.

    The load runs on for the jobs behind it."""
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
    """Read from the store the request wrote before queueing; None for text-to-image."""
    edit = request.edit
    if edit is None:
        return None
    mask = None if edit.mask is None else store.read_input(edit.mask)
    return prepared_inputs(
        store.read_input(edit.source), mask, size=(parameters.width, parameters.height),
        steps=parameters.steps, edit=edit,
    )  # fmt: skip
