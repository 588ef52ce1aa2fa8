"""Distributed mode in one process, for in-process tests of both job modes: the store and
board of a web replica and a worker's runtime as `manage.py run_worker` makes it (heartbeat
every second: JOB_HEARTBEAT_TTL's default of 30 s), on one real redis-server, the worker
taking its jobs one at a time as Celery's solo pool takes their messages. The queue of
messages stands in for the broker only: a message only wakes the worker."""

import contextlib
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from imagegen.distributed.board import RedisJobBoard
from imagegen.distributed.store import JobStore
from imagegen.distributed.timings import RedisTimings
from imagegen.distributed.worker import WorkerRuntime
from imagegen.generation.images import ImageStore
from imagegen.generation.presets import GenerationRules
from imagegen.generation.requests import GenerationRequest
from imagegen.model.loader import ModelLoader
from tests.support.distributed import RedisServer

QUEUE_MAX = 4
KEEP = 20


@dataclass
class SoloWorker:
    store: JobStore
    board: RedisJobBoard
    runtime: WorkerRuntime
    messages: "queue.Queue[str | None]"

    def submit(self, request: GenerationRequest) -> str:
        """Queues the job as a web replica does, and sends its message."""
        job_id = f"job-{time.monotonic_ns()}"
        added = self.store.add(
            job_id, request, owner=None, batch=None, queue_max=QUEUE_MAX, keep=KEEP
        )
        assert added, "the solo worker's queue is full"
        self.messages.put(job_id)
        return job_id


@contextlib.contextmanager
def solo_worker(
    loader: ModelLoader,
    images: Path,
    server: RedisServer,
    *,
    throughput: float = 0.0,
    rules: GenerationRules | None = None,
) -> Iterator[SoloWorker]:
    """`throughput`: the worker's GEN_THROUGHPUT; `rules`: the web side's (its estimates
    need them)."""
    client = server.client()
    client.flushdb()
    store = JobStore(client, heartbeat_ttl=30)
    timings = RedisTimings(client, "test-model")
    board = RedisJobBoard(
        store, models=loader, queue_max=QUEUE_MAX, keep=KEEP, rules=rules, timings=timings
    )
    runtime = WorkerRuntime(
        store, loader, ImageStore(images), name="w1", load_timeout=60, timings=timings,
        throughput=throughput,
    )  # fmt: skip
    runtime.start()
    messages: queue.Queue[str | None] = queue.Queue()

    def solo_pool() -> None:
        while messages.get() is not None:
            runtime.run_next_job()  # the Celery task's body (imagegen.distributed.tasks)

    pool = threading.Thread(target=solo_pool, daemon=True)
    pool.start()
    try:
        yield SoloWorker(store, board, runtime, messages)
    finally:
        messages.put(None)
        pool.join(60)
        runtime.stop()
