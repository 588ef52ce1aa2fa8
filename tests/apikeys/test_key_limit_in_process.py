"""--max-queued in the in-process queue, called in-process on the real tiny pipeline: the
key's jobs are counted under the lock that queues a job, so requests of one key arriving at
the same instant cannot all pass a count taken before any of them was queued."""

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from django.test import override_settings

from imagegen.backend import rules_from_settings
from imagegen.errors import KeyQueueLimit
from imagegen.generation.images import ImageStore
from imagegen.generation.jobs import JobQueue
from imagegen.generation.requests import GenerationRequest
from tests.support.loaders import ready_loader

LONG = GenerationRequest(prompt="a long one", steps=400, size=(64, 64), seed=2)


def test_a_keys_limit_is_counted_in_the_step_that_queues_its_job(hub, share: Path, tmp_path):
    loader = ready_loader(hub, share, tmp_path / "cache")
    with override_settings(MODEL_ID=loader.source.model_id, MODEL_ADAPTERS=()):
        rules = rules_from_settings()
    queue = JobQueue(loader, ImageStore(tmp_path / "images"), queue_max=100, load_timeout=60,
                     keep=200, rules=rules)  # fmt: skip
    ready = threading.Barrier(8)

    def submit(_: int) -> str | None:
        ready.wait()
        try:
            return queue.submit(LONG, key="erin", key_limit=2).id
        except KeyQueueLimit:
            return None

    with ThreadPoolExecutor(8) as pool:
        queued = [job_id for job_id in pool.map(submit, range(8)) if job_id]
    try:
        assert len(queued) == 2
        # Another key is not counted against erin's limit.
        queued.append(queue.submit(LONG, key="bob", key_limit=2).id)
    finally:
        for job_id in queued:
            queue.cancel(job_id)
