"""A Celery worker of distributed mode: one pipeline, one job at a time.

A message wakes the worker to run the job whose turn is next. The generation is the in-process
one; progress goes to the store at each step.

A heartbeat thread refreshes this worker's state and its job's heartbeat. The same round trip
reads a cancel, so the worker learns of it within a second. The generation never waits on
Redis. Each beat sweeps lost jobs, so a killed worker's job runs again within a TTL. Every
write names its attempt. So a worker found lost but only slow stores nothing. The thread also
follows pulls, and runs a job left waiting without a message.

A worker holds a ModelShelf of the models it may run (WORKER_MODELS; every offered one by
default), as the in-process mode does. Its claim applies queue_policy.pick with the models it
holds, so a job for a held model runs before one that needs a swap. Its record in Redis says what
it holds, may run, and has loaded and swapped, by model."""

import contextlib
import gc
import json
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import redis

from core.request_context import job_scope
from imagegen.distributed.store import (
    IDLE,
    PULLS,
    WORKERS,
    Claimed,
    JobStore,
    outcome_fields,
    pull_key,
    worker_key,
)
from imagegen.distributed.timings import RedisTimings
from imagegen.generation.estimates import measured
from imagegen.generation.execution import Outcome, count_finished, run_job
from imagegen.generation.images import ImageStore
from imagegen.generation.previews import DEFAULT_PREVIEWS, Preview, PreviewPolicy
from imagegen.generation.render import Cancelled
from imagegen.generation.upscale import Upscaling
from imagegen.generation.work import CountOnce
from imagegen.model.loader import ModelLoader
from imagegen.model.shelf import ModelShelf

log = logging.getLogger(__name__)


# Beats a job may wait at the head of the queue, this worker idle, before it runs it unasked.
RESCUE_BEATS = 3


def default_worker_name() -> str:
    """Host, pid and random characters: a restarted container often keeps host and pid.

    Two lives of one worker must not read as one in a job's attempts."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(2)}"


@dataclass
class _StoreReport:
    """Progress written to the store. `stopping` is set from the heartbeat or a step's write."""

    store: JobStore
    job_id: str
    attempt: int
    stopping: threading.Event = field(default_factory=threading.Event)

    def _write(self, **fields) -> int:
        try:
            return self.store.update(self.job_id, self.attempt, **fields)
        except redis.RedisError as exc:  # a blip must not fail a generation of minutes
            log.warning("job %s: progress not written: %s", self.job_id, exc)
            return 0

    def stop_requested(self) -> bool:
        return self.stopping.is_set()

    def denoising(self, steps: int) -> None:
        self._write(steps=steps, phase="denoising", denoise_started=repr(time.time()))

    def step(self, done: int, total: int) -> None:
        fields: dict[str, int | str] = {"step": done, "steps": total}
        if done == total:
            fields["phase"] = "decoding"
        if self._write(**fields) != 0:  # cancelled, or found lost: it stops here either way
            self.stopping.set()
        if self.stopping.is_set():
            raise Cancelled()

    def phase(self, text: str) -> None:
        self._write(phase=text)

    def preview(self, preview: Preview) -> None:
        """One per job, written over; a blip loses it."""
        try:
            self.store.write_preview(self.job_id, self.attempt, preview)
        except redis.RedisError as exc:
            log.warning("job %s: preview not written: %s", self.job_id, exc)


class WorkerRuntime:
    def __init__(
        self,
        store: JobStore,
        loader: ModelLoader,
        images: ImageStore,
        *,
        name: str,
        load_timeout: float,
        timings: RedisTimings,
        previews: PreviewPolicy = DEFAULT_PREVIEWS,
        throughput: float = 0.0,
        shelf: ModelShelf | None = None,
        may_run: tuple[str, ...] | None = None,
        upscaling: Upscaling | None = None,
    ) -> None:
        """`loader` is MODEL_ID's; `shelf` holds the models this worker may run (`may_run`, the
        repo ids of WORKER_MODELS; None: every one on the shelf)."""
        self.store = store
        self.upscaling = upscaling  # the offered upscalers and their tiles' budget
        self.previews = previews  # PREVIEW, PREVIEW_EVERY, PREVIEW_SECONDS
        self.timings = timings  # where this worker's jobs' measurements go (the estimates)
        # The model's counted work over this worker's pace, published for every replica before any
        # image.
        self.counting = CountOnce(loader, timings, throughput)
        self.redis = store.redis
        self.loader = loader
        self.shelf = shelf or ModelShelf([loader], None)
        self.default_model = loader.source.model_id
        self.may_run = tuple(may_run) if may_run is not None else tuple(self.shelf.loaders)
        # Loads and swaps (loads that freed another model) by model, and their seconds: the
        # record says them, for the metrics and the tests.
        self.loads: dict[str, int] = {}
        self.swaps: dict[str, int] = {}
        self.load_seconds: dict[str, float] = {}
        for model_loader in self.shelf.loaders.values():
            model_loader.load_guard = self._counted(model_loader, model_loader.load_guard)
        self.images = images
        self.name = name
        self.load_timeout = load_timeout
        self.interval = min(1.0, store.heartbeat_ttl / 3)
        self.job_id: str | None = None
        self.report: _StoreReport | None = None  # the running job's
        self.pulls: int | None = None  # the pull count this worker has followed
        self.model_pulls: dict[str, int] | None = None  # each MODELS entry's
        # The queue's head at this idle worker's last beat, and for how many beats in a row.
        self.waiting_seen: str | None = None
        self.waiting_beats = 0
        # One job at a time, whether Celery's task or this worker's rescue starts it.
        self._one_job = threading.Lock()
        self._closing = threading.Event()  # stop() was called: take up no job
        self._stop = threading.Event()
        # Held while claiming and while a beat says "idle", so a worker that just took a job never
        # reads as idle.
        self._claiming = threading.Lock()

    # -- the heartbeat ------------------------------------------------------------------------

    def start(self) -> None:
        threading.Thread(target=self._beat_forever, name="heartbeat", daemon=True).start()

    def stop(self) -> None:
        """A job this worker took up itself finishes first, as under Celery's warm shutdown. None
        is taken after."""
        self._closing.set()
        with self._one_job:
            self._stop.set()
        with contextlib.suppress(redis.RedisError):
            self.redis.srem(IDLE, self.name)
            self.redis.delete(worker_key(self.name))

    def _beat_forever(self) -> None:
        while not self._stop.is_set():
            try:
                self.beat()
            except redis.RedisError as exc:  # Redis away: beat again when it is back
                log.warning("worker %s: heartbeat not written: %s", self.name, exc)
            self._stop.wait(self.interval)

    def _follow_pulls(self) -> None:
        """Loads each model this worker may run whose pull count grew since the last beat.

        Pulls asked before this process started do not reach it."""
        entries = [m for m in self.may_run if m != self.default_model]
        counts = self.redis.mget([PULLS, *(pull_key(m) for m in entries)])
        pulls = int(counts[0] or 0)
        model_pulls = {m: int(c or 0) for m, c in zip(entries, counts[1:], strict=True)}
        if self.pulls is not None and self.model_pulls is not None:
            grown = [m for m, c in model_pulls.items() if c > self.model_pulls.get(m, 0)]
            if pulls > self.pulls and self.default_model in self.may_run:
                grown.insert(0, self.default_model)
            for model in grown:
                loader = self.shelf.loader(model)
                if loader.source.complete_manifest() is not None:
                    loader.pull()  # in the background; False (nothing to do) when ready
        self.pulls, self.model_pulls = pulls, model_pulls

    def record(self) -> dict:
        """This worker's state as GET /model/status and other workers' claims read it."""
        status = self.loader.status()
        return {
            "name": self.name, "state": status.state, "error": status.error,
            "job": self.job_id, "pulls": self.pulls, "model_pulls": self.model_pulls,
            "models": self.shelf.resident(), "worker_models": list(self.may_run),
            "states": {m: self.shelf.loader(m).status().state for m in self.may_run},
            "loads": self.loads, "swaps": self.swaps, "load_seconds": self.load_seconds,
        }  # fmt: skip

    def _write_record(self) -> None:
        """Written under _claiming, so a worker that just took a job never reads as idle."""
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(worker_key(self.name), json.dumps(self.record()), px=self.store.ttl_ms)
            pipe.sadd(WORKERS, self.name)
            if self.job_id is None:
                pipe.sadd(IDLE, self.name)
            pipe.execute()

    def beat(self) -> None:
        self._follow_pulls()
        with self._claiming:
            job_id, report = self.job_id, self.report
            self._write_record()
        if report is not None and self.store.beat(report.job_id, report.attempt):
            report.stopping.set()  # a cancel asked, or this run found lost
        self.store.sweep()  # other workers' lost jobs, found whether or not anyone reads them
        if job_id is None:
            self._take_a_job_left_waiting()

    def _take_a_job_left_waiting(self) -> None:
        """Runs the head of the queue when it waited RESCUE_BEATS beats with this worker idle.

        An idle consumer takes a message within a second, so that message was lost, or the
        consumer stopped. Celery's Redis consumer can stop for good when the broker goes away
        mid-ack. The job would wait forever."""
        head = self.first_runnable()
        if head is None or head != self.waiting_seen:
            self.waiting_seen, self.waiting_beats = head, 0
            return
        self.waiting_beats += 1
        if self.waiting_beats < RESCUE_BEATS or self._one_job.locked() or self._closing.is_set():
            return
        log.warning("job %s: waited %d beats with worker %s idle and no message taken; "
                    "the worker takes it itself", head, self.waiting_beats, self.name)  # fmt: skip
        self.waiting_seen, self.waiting_beats = None, 0
        threading.Thread(target=self._take_up, name="take-up", daemon=True).start()

    def handoff(self) -> str | None:
        """The idle worker to wake for the first waiting job this one left: one holding its
        model, else one whose WORKER_MODELS lets it run it. None when no job waits for one."""
        _, _, waiting, others = self.store.waiting(self.name, self.default_model)
        for job in waiting:
            holders = [n for n, r in others.items() if job.model in r.get("models", [])]
            runners = [n for n, r in others.items() if job.model in r.get("worker_models", [])]
            if found := holders or runners:
                return found[0]
        return None

    def first_runnable(self) -> str | None:
        """The first waiting job this worker may run (WORKER_MODELS)."""
        _, ids, waiting, _ = self.store.waiting(self.name, self.default_model)
        return next(
            (i for i, job in zip(ids, waiting, strict=True) if job.model in self.may_run), None
        )

    def _counted(
        self, loader: ModelLoader, guard: Callable[[], AbstractContextManager]
    ) -> Callable[[], AbstractContextManager]:
        """`loader`'s load guard, counting each load that ends resident, and as a swap when it
        freed another model."""

        @contextlib.contextmanager
        def counted() -> Iterator[None]:
            started = time.monotonic()
            before = set(self.shelf.resident())
            with guard():
                yield
            model = loader.source.model_id
            self.loads[model] = self.loads.get(model, 0) + 1
            seconds = self.load_seconds.get(model, 0.0) + time.monotonic() - started
            self.load_seconds[model] = round(seconds, 3)
            if before - set(self.shelf.resident()):
                self.swaps[model] = self.swaps.get(model, 0) + 1

        return counted

    def _take_up(self) -> None:
        with self._one_job:
            if not self._closing.is_set():  # stop() may have come between
                self._run_next_job()

    # -- one job ------------------------------------------------------------------------------

    def run_next_job(self) -> str | None:
        """The id of the job run, if any was left. One at a time, however started."""
        with self._one_job:
            return self._run_next_job()

    def _run_next_job(self) -> str | None:
        with self._claiming:
            claimed = self.store.claim(
                self.name, held=self.shelf.resident(), may_run=self.may_run,
                default_model=self.default_model,
            )  # fmt: skip
            if claimed is None:
                return None
            self.job_id = job_id = claimed.job_id
            self.report = report = _StoreReport(self.store, job_id, claimed.attempt)
        try:
            with job_scope(job=job_id, rid=claimed.request_id, name=self.name):
                log.info("job %s: running on %s (run %d)", job_id, self.name, claimed.attempt)
                self._run(report, claimed)
        finally:
            with self._claiming:
                self.job_id, self.report = None, None
                with contextlib.suppress(redis.RedisError):
                    self._write_record()  # idle, with what it holds now
            gc.collect()  # a cancelled or failed run's tensors go now, not later
        return job_id

    def _run(self, report: _StoreReport, claimed: Claimed) -> None:
        request = claimed.request
        loader = self.shelf.loader(request.model or self.default_model)
        with loader.in_use():  # not freed for another model's load under this job
            outcome = self._run_on(loader, report, claimed)
        # Measured before the job is seen finished, so the client's next estimate uses it. A blip
        # loses a measurement, never the job. The measurements are MODEL_ID's (the estimates').
        default = request.model is None
        if default and outcome.image and (timing := measured(outcome.image, home=loader.device)):
            try:
                self.timings.record(timing, native=request.size is None)
            except redis.RedisError as exc:
                log.warning("job %s: timing not recorded: %s", report.job_id, exc)
        self.finish(claimed, outcome)

    def _run_on(self, loader: ModelLoader, report: _StoreReport, claimed: Claimed) -> Outcome:
        request = claimed.request
        return run_job(
            job_id=report.job_id,
            loader=loader,
            store=self.images,
            request=request,
            key=claimed.key,
            queued_seconds=(claimed.started_at - claimed.created_at).total_seconds(),
            load_timeout=self.load_timeout,
            report=report,
            previews=self.previews,
            upscaling=self.upscaling,
        )

    def finish(self, claimed: Claimed, outcome: Outcome) -> bool:
        """Writes this run's outcome, retrying while Redis is away; the heartbeat keeps the job
        meanwhile.

        Refused when the run is no longer current; its image is then removed, so it is stored
        once."""
        while True:
            try:
                written = self.store.finish(
                    claimed.job_id, claimed.attempt, **outcome_fields(outcome)
                )
                break
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                log.warning("job %s: outcome not written yet: %s", claimed.job_id, exc)
                time.sleep(self.interval)
        if not written:
            log.warning("job %s: run %d was found lost; its outcome is dropped",
                        claimed.job_id, claimed.attempt)  # fmt: skip
            if outcome.image is not None:
                self.images.delete(outcome.image.id)
        else:
            count_finished(outcome)
        return written


_runtime: WorkerRuntime | None = None


def set_runtime(runtime: WorkerRuntime) -> None:
    global _runtime
    _runtime = runtime


def get_runtime() -> WorkerRuntime:
    if _runtime is None:
        raise RuntimeError("not a worker process: start it with `manage.py run_worker`")
    return _runtime
