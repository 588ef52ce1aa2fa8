"""The JobBoard of a web process in distributed mode: the in-process board's calls, on Redis.

A web process only accepts, looks up and cancels jobs; Celery workers run them. Everything
lives in the store, so any replica answers for any job."""

import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from functools import cached_property

import redis
from kombu.exceptions import OperationalError

from imagegen import metrics
from imagegen.distributed.changes import FALLBACK_SECONDS, ChangeFeed
from imagegen.distributed.shared_model import live_workers, may_run
from imagegen.distributed.store import JobStore
from imagegen.distributed.timings import RedisTimings
from imagegen.errors import (
    JobFinished,
    NoWorkerForModel,
    QueueFull,
)
from imagegen.generation.estimates import Estimate, estimate
from imagegen.generation.job_board import FINISHED, JobView, ahead_of, check_loadable
from imagegen.generation.parameters import with_defaults
from imagegen.generation.presets import GenerationRules
from imagegen.generation.previews import Preview
from imagegen.generation.requests import GenerationRequest
from imagegen.model.status import ModelHandle

log = logging.getLogger(__name__)

# How often a waiting request reads its job on a board without a change feed (store tests).
POLL_SECONDS = 0.05


class RedisJobBoard:
    def __init__(
        self,
        store: JobStore,
        *,
        models: ModelHandle,
        queue_max: int,
        keep: int,
        rules: GenerationRules,
        timings: RedisTimings,
        changes: ChangeFeed | None = None,
        entries: Mapping[str, tuple[ModelHandle, GenerationRules]] | None = None,
    ) -> None:
        """`models` is MODEL_ID's; `entries` each MODELS entry's handle and rules, by repo id."""
        self.jobs = store
        self.timings = timings  # what the workers measured (the estimates)
        self.models = models
        self.queue_max = queue_max
        self.keep = keep
        self.rules = rules
        self.entries = dict(entries or {})
        # MODEL_ID: a loader's or SharedModel's source names it.
        self.default_model: str = getattr(getattr(models, "source", None), "model_id", "")
        # Waiting requests wake on the store's announcements; None: each polls every POLL_SECONDS.
        self.changes = changes

    @cached_property
    def _celery(self):
        from imagegen.distributed.celery_app import app

        return app

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
        """Queues a generation, or refuses it at once.

        503 from every replica: no live worker may run its model, the model not on the share, a
        download under way, the queue full. 429: the key's `key_limit`, counted in the step that
        queues."""
        handle, rules = self.model_of(request)
        model_id = request.model or self.default_model
        self._check_runnable(model_id, default=request.model is None)
        check_loadable(handle, request.model)  # 409/503 now rather than a failed job later
        request = with_defaults(request, rules=rules)
        job_id = job_id or secrets.token_hex(8)
        if not self.jobs.add(
            job_id,
            request,
            owner=owner,
            batch=batch,
            key=key,
            key_limit=key_limit,
            queue_max=self.queue_max,
            keep=self.keep,
            model=model_id,
        ):
            raise QueueFull()
        try:
            # Wakes one worker to run the next job, whichever.
            self._celery.send_task("imagegen.run_next_job", args=[job_id])
        except (OperationalError, redis.RedisError):
            self.jobs.forget(job_id)
            raise
        view = self.lookup(job_id)
        assert view is not None, f"job {job_id} was queued and is gone"  # only forget removes it
        return view

    def model_of(self, request: GenerationRequest) -> tuple[ModelHandle, GenerationRules]:
        """The handle and rules of the model that runs `request`: MODEL_ID's unless it names
        a MODELS entry."""
        if request.model is None:
            return self.models, self.rules
        return self.entries[request.model]

    def _check_runnable(self, model_id: str, *, default: bool) -> None:
        """Refuses a job no live worker may run (WORKER_MODELS). With no live worker at all it
        is queued: the worker a scaler starts takes it."""
        if not model_id:
            return
        workers = live_workers(self.jobs.redis)
        if workers and not any(may_run(w, model_id, default=default) for w in workers):
            raise NoWorkerForModel(model_id, [w["name"] for w in workers])

    def estimate(self, request: GenerationRequest, *, count: int = 1) -> Estimate | None:
        """Behind every unfinished job, spread over the live workers, from the workers'
        measurements."""
        request = with_defaults(request, rules=self.model_of(request)[1])
        views = self.jobs.views(self.jobs.unfinished_ids())
        ahead = [found for view in views if view and (found := ahead_of(view))]
        workers = len(live_workers(self.jobs.redis))
        return estimate(
            self.timings.measurements(), request, ahead=ahead, workers=workers, count=count
        )

    def lookup(self, job_id: str) -> JobView | None:
        return self.jobs.view(job_id)

    def recent(self, limit: int) -> list[JobView]:
        return [v for v in self.jobs.views(self.jobs.recent_ids(limit)) if v is not None]

    def unfinished(self) -> list[JobView]:
        """From the unfinished list, not `recent`: a long job stays listed while others finish
        many."""
        views = self.jobs.views(list(reversed(self.jobs.unfinished_ids())))
        return [v for v in views if v is not None and v.state not in FINISHED]

    def client_jobs(self, client: str) -> list[JobView]:
        views = self.jobs.views(list(reversed(self.jobs.recent_ids())))
        return [v for v in views if v is not None and v.owner == client]

    def cancel(self, job_id: str) -> JobView | None:
        state = self.jobs.cancel(job_id)
        if state is None:
            return None
        if state in FINISHED:
            raise JobFinished(state)
        if state == "queued":  # ended here, never run: no worker counts it
            metrics.JOBS_FINISHED.labels(outcome="cancelled").inc()
        return self.lookup(job_id)

    def preview(self, job_id: str, partial: int | None = None) -> Preview | None:
        return self.jobs.preview(job_id, partial)

    def wait(self, job_id: str, timeout: float | None) -> JobView | None:
        """The finished job's view, or its view at `timeout`."""
        return self._wait_for(
            job_id, timeout, lambda view: view.state in FINISHED, queue_moves=False
        )

    def wait_change(self, job_id: str, after: int, timeout: float) -> JobView | None:
        """The view once its revision passes `after`, or at `timeout`; None for an unknown job."""
        return self._wait_for(job_id, timeout, lambda view: view.revision > after)

    def _wait_for(
        self,
        job_id: str,
        timeout: float | None,
        done: Callable[[JobView], bool],
        *,
        queue_moves: bool = True,
    ) -> JobView | None:
        """Reads the job after each announced change, and at least every FALLBACK_SECONDS.

        Each read also notices a lost worker. Without a feed it polls every POLL_SECONDS."""
        deadline = None if timeout is None else time.monotonic() + timeout
        interval = POLL_SECONDS if self.changes is None else FALLBACK_SECONDS
        with contextlib.ExitStack() as stack:
            changed = (
                threading.Event() if self.changes is None
                else stack.enter_context(self.changes.watch(job_id, queue_moves=queue_moves))
            )  # fmt: skip
            while True:
                changed.clear()
                view = self.lookup(job_id)
                if view is None or done(view):
                    return view
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return view
                changed.wait(interval if left is None else min(interval, left))
