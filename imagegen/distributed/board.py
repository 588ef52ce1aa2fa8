"""The JobBoard of a web process in distributed mode (JOB_BROKER_URL set): the same calls the
in-process JobQueue answers (imagegen.generation.job_board), so services, selectors and routes
do not know the mode.

A web process only accepts, looks up and cancels jobs; Celery workers run them
(imagegen.distributed.worker). Everything a client sees lives in the shared store
(imagegen.distributed.store), so any replica answers for any job.
"""

import logging
import secrets
import time
from functools import cached_property

import redis
from kombu.exceptions import OperationalError

from imagegen.distributed.shared_model import live_workers
from imagegen.distributed.store import JobStore
from imagegen.distributed.timings import RedisTimings
from imagegen.errors import JobFinished, QueueFull
from imagegen.generation.estimates import Estimate, estimate
from imagegen.generation.job_board import FINISHED, JobView, ahead_of
from imagegen.generation.presets import GenerationRules
from imagegen.generation.render import GenerationRequest, with_defaults
from imagegen.model.status import ModelHandle

log = logging.getLogger(__name__)

# How often a waiting request looks at its job again. Reading a job is one round trip of a
# fraction of a millisecond, and each look also notices a lost worker.
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
    ) -> None:
        self.jobs = store
        self.timings = timings  # what the workers measured (the estimates)
        self.models = models
        self.queue_max = queue_max
        self.keep = keep
        self.rules = rules

    @cached_property
    def _celery(self):
        from config.celery import app

        return app

    def submit(
        self, request: GenerationRequest, *, owner: str | None = None, batch: str | None = None
    ) -> JobView:
        """Queues a generation in the shared queue, or refuses it at once (model not on the
        share, a download under way, the shared queue full: 503 from every replica)."""
        self.models.check_loadable()
        request = with_defaults(request, rules=self.rules)
        job_id = secrets.token_hex(8)
        if not self.jobs.add(
            job_id, request, owner=owner, batch=batch, queue_max=self.queue_max, keep=self.keep
        ):
            raise QueueFull()
        try:
            # A wake-up call for one worker: it runs the oldest waiting job, whichever.
            self._celery.send_task("imagegen.run_next_job", args=[job_id])
        except (OperationalError, redis.RedisError):
            self.jobs.forget(job_id)
            raise
        view = self.lookup(job_id)
        assert view is not None, f"job {job_id} was queued and is gone"  # only forget removes it
        return view

    def estimate(self, request: GenerationRequest, *, count: int = 1) -> Estimate | None:
        """How long `count` images of `request` would take if submitted now: behind every
        unfinished job, spread over the live workers, from what the workers measured."""
        request = with_defaults(request, rules=self.rules)
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
        """From the store's list of unfinished jobs (the one KEDA scales on), not from
        `recent`: a long job on one worker stays listed while others finish many."""
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
        return self.lookup(job_id)

    def wait(self, job_id: str, timeout: float | None) -> JobView | None:
        """The job's view once it has finished, or as it is when `timeout` runs out."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            view = self.lookup(job_id)
            if view is None or view.state in FINISHED:
                return view
            if deadline is not None and time.monotonic() >= deadline:
                return view
            time.sleep(POLL_SECONDS if deadline is None else
                       max(0.0, min(POLL_SECONDS, deadline - time.monotonic())))  # fmt: skip

    def wait_change(self, job_id: str, after: int, timeout: float) -> JobView | None:
        """The view as soon as its revision passes `after`, or the current view at `timeout`;
        None for an unknown job. The revision is read alone (one small reply) until it moves;
        the whole view is read every second anyway, so a lost worker is noticed."""
        deadline = time.monotonic() + timeout
        next_full = time.monotonic() + 1.0
        while True:
            revision = self.jobs.revision(job_id)
            if revision is None:
                return None
            now = time.monotonic()
            if revision > after or now >= deadline or now >= next_full:
                view = self.lookup(job_id)
                if view is None or view.revision > after or now >= deadline:
                    return view
                next_full = now + 1.0
            time.sleep(max(0.0, min(POLL_SECONDS, deadline - time.monotonic())))
