"""The in-process job board: every generation is a job in one bounded queue.

One worker thread runs jobs one at a time: a second generation would halve the speed of both and
double the memory. It takes a job for a model in memory before one that needs a swap, within
queue_policy's bound. Jobs live as long as the process; their images outlive it."""

import gc
import logging
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from core import request_context
from core.errors import ServiceError
from core.timestamps import utc_now
from imagegen import metrics
from imagegen.errors import (
    JobFinished,
    ModelDownloading,
    ModelFailed,
    ModelLoading,
    ModelNotPulled,
    OfferedModelNotPulled,
    naming_model,
)
from imagegen.generation import queue_policy
from imagegen.generation.estimates import Estimate, LocalTimings, estimate, measured
from imagegen.generation.execution import Outcome, count_finished, run_job
from imagegen.generation.images import ImageRecord, ImageStore
from imagegen.generation.job_board import (
    CANCELLING,
    FINISHED,
    JobProgress,
    JobState,
    JobView,
    ahead_of,
    check_loadable,
    job_progress,
)
from imagegen.generation.parameters import with_defaults
from imagegen.generation.presets import GenerationRules
from imagegen.generation.previews import DEFAULT_PREVIEWS, Preview, PreviewPolicy
from imagegen.generation.priority import lower_this_thread
from imagegen.generation.render import Cancelled
from imagegen.generation.requests import GenerationRequest
from imagegen.generation.upscale import Upscaling
from imagegen.generation.work import CountOnce, LoadTimes
from imagegen.model.loader import ModelLoader
from imagegen.model.shelf import ModelShelf

log = logging.getLogger(__name__)


@dataclass
class Job:
    """A generation's life in this process.

    Changed only under the queue's lock. Answers are built from a JobView, never read field by
    field."""

    request: GenerationRequest
    id: str = field(default_factory=lambda: secrets.token_hex(8))
    # Who submitted it, and its batch (the n images of one request), for the protocol routes. None
    # on the native routes.
    owner: str | None = None
    batch: str | None = None
    # The X-Request-ID that queued it: one id follows a request into its job's logs.
    request_id: str | None = None
    # The API key that submitted it: its jobs and images are that key's own. None on an open
    # service.
    key: str | None = None
    # Its place in the queue (queue_policy.order: round among keys, then arrival).
    place: int = 0
    # How often a job behind it ran first (queue_policy.pick), and when it was queued.
    passed: int = 0
    since: float = field(default_factory=time.monotonic)
    position: int | None = None  # 1 runs next, the passes to come counted (JobQueue._reposition)
    state: JobState = JobState.QUEUED
    phase: str = "waiting for its turn"
    created_at: datetime = field(default_factory=utc_now)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    step: int = 0
    steps: int = 0
    # Grows with every change a client could see, so a watcher can wait for "anything newer".
    revision: int = 0
    denoise_started: float | None = None
    error: str | None = None
    failure: ServiceError | None = None
    image: ImageRecord | None = None
    preview: Preview | None = None  # the latest only
    partials: list[Preview] = field(default_factory=list)  # an OpenAI stream's, in order
    cancel_requested: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)

    def progress(self) -> JobProgress:
        denoise_started = self.denoise_started
        return job_progress(
            state=self.state,
            step=self.step,
            steps=self.steps,
            started_at=self.started_at,
            finished_at=self.finished_at,
            now=utc_now(),
            denoise_seconds=(
                None if denoise_started is None else time.monotonic() - denoise_started
            ),
        )


class JobQueue:
    def __init__(
        self,
        loader: ModelLoader,
        store: ImageStore,
        *,
        queue_max: int,
        load_timeout: float,
        keep: int,
        rules: GenerationRules,
        nice: int = 0,
        previews: PreviewPolicy = DEFAULT_PREVIEWS,
        throughput: float = 0.0,
        models: Mapping[str, tuple[ModelLoader, GenerationRules]] | None = None,
        shelf: ModelShelf | None = None,
        upscaling: Upscaling | None = None,
    ) -> None:
        self.loader = loader
        self.upscaling = upscaling  # the offered upscalers and their tiles' budget
        # The MODELS entries by repo id, each its loader and rules: a request's `model`.
        self.models = dict(models or {})
        # Every offered model's loader and the memory rule: which models are held, what a swap
        # costs. None: MODEL_ID's loader alone.
        self.shelf = shelf
        self.loads = LoadTimes()  # each model's last measured swap, else its size's
        self.previews = previews  # PREVIEW, PREVIEW_EVERY, PREVIEW_SECONDS
        self.nice = nice  # GEN_NICE: how far below the request threads the generation runs
        self.rules = rules
        self.store = store
        self.queue_max = queue_max
        self.load_timeout = load_timeout
        self.keep = keep
        self._lock = threading.Condition()
        self._queued: deque[Job] = deque()
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._worker: threading.Thread | None = None
        self._running: Job | None = None
        self._rounds: dict[str, int] = {}  # each key's latest round (queue_policy.fair_round)
        self._served = 0  # the round of the job that started last
        self._arrivals = 0  # jobs queued so far: the order within a round
        self.timings = LocalTimings()  # what this process's jobs measured (the estimates)
        # The model's work counted at its load: the estimate before any image (paced by
        # GEN_THROUGHPUT).
        self.counting = CountOnce(loader, self.timings, throughput)

    # -- what the routes call -----------------------------------------------------------

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
        """Queues a generation, or refuses it with nothing started.

        The key's jobs are counted under the lock that admits it. The model loads when the worker
        takes the job."""
        loader, rules = self.model_of(request)
        check_loadable(loader, request.model)  # 409/503 now rather than a failed job later
        request = with_defaults(request, rules=rules)
        job = Job(
            request=request, owner=owner, batch=batch, key=key,
            request_id=request_context.current_request_id(),
        )  # fmt: skip
        if job_id is not None:
            job.id = job_id
        with self._lock:
            queue_policy.admit(
                key_jobs=queue_policy.key_jobs(
                    (j.key for j in self._jobs.values() if j.state not in FINISHED), key
                ),
                key_limit=key_limit,
                waiting=queue_policy.waiting_jobs(len(self._queued), int(self._running is None)),
                queue_max=self.queue_max,
            )
            self._arrivals += 1
            round_ = queue_policy.fair_round(self._rounds, job.key, served=self._served)
            job.place = queue_policy.order(round_, self._arrivals)
            self._enqueue(job)
            self._jobs[job.id] = job
            self._forget_old_jobs()
            self._start_worker()
            self._lock.notify_all()  # the worker, among the watchers waiting on the lock
        return self.view(job)

    def model_of(self, request: GenerationRequest) -> tuple[ModelLoader, GenerationRules]:
        """The loader and rules of the model that runs `request`: MODEL_ID's unless it names
        a MODELS entry."""
        if request.model is None:
            return self.loader, self.rules
        return self.models[request.model]

    def estimate(self, request: GenerationRequest, *, count: int = 1) -> Estimate | None:
        """How long `count` images would take if submitted now, behind the running job and the
        queue."""
        loader, rules = self.model_of(request)
        request = with_defaults(request, rules=rules)
        with self._lock:
            jobs = [job for job in (self._running, *self._queued) if job is not None]
            ahead = [found for job in jobs if (found := ahead_of(self.view(job)))]
            # A job ahead for the same model loads it first.
            loaded_ahead = any(self._model_id(job) == loader.source.model_id for job in jobs)
        load = 0.0
        if not loader.resident and not loaded_ahead:
            load = self.loads.seconds(loader)
        return estimate(
            self.timings.measurements(), request, ahead=ahead, workers=1, count=count,
            load_seconds=load,
        )  # fmt: skip

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def lookup(self, job_id: str) -> JobView | None:
        job = self.get(job_id)
        return None if job is None else self.view(job)

    def recent(self, limit: int) -> list[JobView]:
        """Newest first."""
        with self._lock:
            return [self.view(job) for job in list(reversed(self._jobs.values()))[:limit]]

    def unfinished(self) -> list[JobView]:
        """Newest first. Unfinished jobs are never forgotten, so all are here."""
        with self._lock:
            jobs = [job for job in reversed(self._jobs.values()) if job.state not in FINISHED]
            return [self.view(job) for job in jobs]

    def client_jobs(self, client: str) -> list[JobView]:
        """Oldest first."""
        with self._lock:
            return [self.view(job) for job in self._jobs.values() if job.owner == client]

    def wait(self, job_id: str, timeout: float | None) -> JobView | None:
        """The finished job's view, or its view at `timeout`."""
        job = self.get(job_id)
        if job is None:
            return None
        job.done.wait(timeout)
        return self.view(job)

    def view(self, job: Job) -> JobView:
        with self._lock:
            position = job.position if job.state is JobState.QUEUED else None
            stopping = job.cancel_requested.is_set()
            return JobView(
                id=job.id,
                state=job.state,
                position=position,
                phase=CANCELLING if job.state is JobState.RUNNING and stopping else job.phase,
                progress=job.progress(),
                parameters=job.request,
                created_at=job.created_at,
                started_at=job.started_at,
                finished_at=job.finished_at,
                error=job.error,
                image=job.image,
                revision=job.revision,
                request_id=job.request_id,
                preview_step=0 if job.preview is None else job.preview.step,
                owner=job.owner,
                batch=job.batch,
                key=job.key,
                failure=job.failure,
            )

    def wait_change(self, job_id: str, after: int, timeout: float) -> JobView | None:
        """The job's view once its revision passes `after`, or at `timeout`.

        None for a job this process does not know or has forgotten."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while (job := self._jobs.get(job_id)) is not None and job.revision <= after:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._lock.wait(remaining)
            return None if job is None else self.view(job)

    def cancel(self, job_id: str) -> JobView | None:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                return None
            if job.state in FINISHED:
                raise JobFinished(job.state.value)
            if job.state is JobState.QUEUED:
                self._leave_queue(job)
                self._finish(job, Outcome(JobState.CANCELLED, "cancelled before it ran"))
                metrics.JOBS_FINISHED.labels(outcome=JobState.CANCELLED.value).inc()
            else:
                job.cancel_requested.set()
                self._changed(job)  # its phase now says it is stopping
        return self.view(job)

    def preview(self, job_id: str, partial: int | None = None) -> Preview | None:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                return None
            if partial is None:
                return job.preview
            return next((p for p in job.partials if p.partial == partial), None)

    def _changed(self, job: Job) -> None:
        """Counts a change a client could see and wakes its watchers. Lock held."""
        job.revision += 1
        self._lock.notify_all()

    def _enqueue(self, job: Job) -> None:
        """Places a job by the queue's order; the jobs it runs before move down. Lock held."""
        place = queue_policy.place_in([queued.place for queued in self._queued], job.place)
        self._queued.insert(place, job)
        self._reposition()

    def _leave_queue(self, job: Job) -> None:
        """The jobs after it move up. Lock held."""
        self._queued.remove(job)
        self._reposition()

    # -- which job runs next: queue_policy.pick on the models held ------------------------

    def _model_id(self, job: Job) -> str:
        """The repo id a job runs on."""
        return job.request.model or self.loader.source.model_id

    def _held(self) -> list[str]:
        """The models in memory now: the shelf's resident ones."""
        if self.shelf is not None:
            return self.shelf.resident()
        return [self.loader.source.model_id] if self.loader.resident else []

    def _waiting(self, jobs: list[Job], passes: dict[str, int]) -> list[queue_policy.Waiting]:
        return [
            queue_policy.Waiting(self._model_id(job), passes[job.id], job.since) for job in jobs
        ]

    def _pick(self, jobs: list[Job], held: Collection[str], passes: dict[str, int]) -> int:
        """The index queue_policy.pick runs next; the jobs before it are passed once each."""
        found = queue_policy.pick(self._waiting(jobs, passes), held, now=time.monotonic())
        index = 0 if found is None else found  # None only leaves jobs to other workers
        for passed in jobs[:index]:
            passes[passed.id] += 1
        return index

    def _next(self) -> Job:
        """The job the worker runs now, taken out of the queue. Lock held."""
        jobs = list(self._queued)
        passes = {job.id: job.passed for job in jobs}
        job = self._running = jobs[self._pick(jobs, self._held(), passes)]
        for waiting in jobs:
            waiting.passed = passes[waiting.id]
        self._leave_queue(job)
        return job

    def _held_after(self, held: list[str], model: str) -> list[str]:
        """The models held once `model` is loaded: beside the others if they fit, else alone.

        The shelf's rule without its LRU order: a prediction for positions only."""
        if model in held:
            return held
        if self.shelf is None:
            return [model]
        together = [*held, model]
        sizes = [self.loads.size(self.shelf.loader(m)) for m in together]
        return together if self.shelf.fits(sizes) else [model]

    def _reposition(self) -> None:
        """Each queued job's position in the order the worker will run them, passes included:
        the picks played forward from the models held after the running job. A job whose
        position changed gets a new revision. Lock held."""
        jobs = list(self._queued)
        held = self._held()
        if self._running is not None:
            held = self._held_after(held, self._model_id(self._running))
        passes = {job.id: job.passed for job in jobs}
        position = 0
        while jobs:
            job = jobs.pop(self._pick(jobs, held, passes))
            held = self._held_after(held, self._model_id(job))
            position += 1
            if job.position != position:
                job.position = position
                self._changed(job)

    # -- the worker -----------------------------------------------------------------------

    def _start_worker(self) -> None:
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._work, name="generation", daemon=True)
            self._worker.start()

    def _work(self) -> None:
        lower_this_thread(self.nice)  # before torch starts its threads for this one
        while True:
            with self._lock:
                while not self._queued:
                    self._lock.wait()
                job = self._next()
                self._served = max(self._served, queue_policy.round_of(job.place))
                job.state, job.started_at = JobState.RUNNING, utc_now()
                job.phase = "loading the model"
                if self.models and not self.model_of(job.request)[0].resident:  # a swap, named
                    job.phase = f"loading model {self._model_id(job)}"
                self._changed(job)
            try:
                with request_context.job_scope(job=job.id, rid=job.request_id):
                    self._run(job)
            except Exception:  # the worker must outlive any one job
                log.exception("job %s crashed the worker loop", job.id)
            finally:
                with self._lock:
                    self._running = None
                if job.state is not JobState.SUCCEEDED:
                    # A failed or cancelled run's tensors are held in cycles by its traceback:
                    # collect them now. Not after a success: with a model loaded, a full collection
                    # stalls every request.
                    gc.collect()

    def _run(self, job: Job) -> None:
        assert job.started_at is not None, "a job runs once _work has started it"
        loader = self.model_of(job.request)[0]
        cold = not loader.resident
        with loader.in_use():  # not freed for another model's load under this job
            outcome = self._run_on(job, loader)
        if cold and outcome.image is not None:  # its wait was the swap: freeing and load
            self.loads.record(loader, outcome.image.timings.get("model_wait_seconds"))
        outcome = self._naming_model(outcome, self._model_id(job))
        # Measured before the job is seen finished, so its client's next request is
        # estimated with it.
        # The measurements are MODEL_ID's (the estimates'): another model's would mislead them.
        default = job.request.model is None
        if (
            default
            and outcome.image
            and (timing := measured(outcome.image, home=self.loader.device))
        ):
            self.timings.record(timing, native=job.request.size is None)
        self._finish(job, outcome)
        count_finished(outcome)

    def _run_on(self, job: Job, loader: ModelLoader) -> Outcome:
        assert job.started_at is not None, "a job runs once _work has started it"
        return run_job(
            job_id=job.id,
            loader=loader,
            store=self.store,
            request=job.request,
            key=job.key,
            queued_seconds=(job.started_at - job.created_at).total_seconds(),
            load_timeout=self.load_timeout,
            report=_LocalReport(self._lock, job, self._changed),
            previews=self.previews,
            upscaling=self.upscaling,
        )

    def _naming_model(self, outcome: Outcome, model_id: str) -> Outcome:
        """A failed load names its model where several are offered: the job may have waited
        for a swap to it."""
        failure = outcome.failure
        if not self.models or failure is None or isinstance(failure, OfferedModelNotPulled):
            return outcome
        if isinstance(failure, ModelNotPulled):
            named: ServiceError = OfferedModelNotPulled(model_id)
        elif isinstance(failure, (ModelLoading, ModelDownloading, ModelFailed)):
            named = naming_model(failure, model_id)
        else:
            return outcome
        return replace(outcome, error=named.message, failure=named)

    def _finish(self, job: Job, outcome: Outcome) -> None:
        with self._lock:
            job.state, job.phase, job.error = outcome.state, outcome.phase, outcome.error
            job.image, job.failure = outcome.image, outcome.failure
            job.finished_at = utc_now()
            self._changed(job)
        job.done.set()

    def _forget_old_jobs(self) -> None:
        """Drops the finished jobs queue_policy.forget names."""
        finished = [j.id for j in self._jobs.values() if j.state in FINISHED]
        for job_id in queue_policy.forget(finished, self.keep):
            del self._jobs[job_id]


@dataclass
class _LocalReport:
    """A running job's progress, written under the queue's lock. Each write wakes the job's
    watchers."""

    lock: threading.Condition
    job: Job
    changed: Callable[[Job], None]

    def stop_requested(self) -> bool:
        return self.job.cancel_requested.is_set()

    def denoising(self, steps: int) -> None:
        with self.lock:
            self.job.steps = steps
            self.job.phase = "denoising"
            self.job.denoise_started = time.monotonic()
            self.changed(self.job)

    def step(self, done: int, total: int) -> None:
        with self.lock:
            self.job.step, self.job.steps = done, total
            if done == total:
                self.job.phase = "decoding"
            self.changed(self.job)
        if self.job.cancel_requested.is_set():
            raise Cancelled()

    def phase(self, text: str) -> None:
        with self.lock:
            self.job.phase = text
            self.changed(self.job)

    def preview(self, preview: Preview) -> None:
        with self.lock:
            self.job.preview = preview
            if preview.partial is not None:
                self.job.partials.append(preview)
            self.changed(self.job)
