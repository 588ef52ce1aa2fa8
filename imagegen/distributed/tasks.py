"""The one Celery task: wake a worker to run the job whose turn is next.

The job id in the message is for the logs only: the store's order decides which job runs. A
worker that finds no job for itself while jobs wait (pick leaves them to an idle worker holding
their model, or WORKER_MODELS leaves them out) hands the message to the idle worker that takes
the first of them, on that worker's own queue (celery_app.worker_queue), at most HANDOFFS times
in a row; past that, or with no such worker idle, an idle worker's beat finds its job
(imagegen.distributed.worker RESCUE_BEATS)."""

import logging

import redis
from kombu.exceptions import OperationalError

from imagegen.distributed.celery_app import app, worker_queue
from imagegen.distributed.worker import get_runtime

log = logging.getLogger(__name__)

HANDOFFS = 3


@app.task(name="imagegen.run_next_job", ignore_result=True)
def run_next_job(submitted: str, handed: int = 0) -> None:
    runtime = get_runtime()
    if runtime.run_next_job() is not None:
        return
    target = runtime.handoff() if handed < HANDOFFS else None
    if target is None:
        log.info("message of job %s: no job waiting for this worker", submitted)
        return
    log.info("message of job %s: handed to worker %s", submitted, target)
    try:
        app.send_task(
            "imagegen.run_next_job", args=[submitted], kwargs={"handed": handed + 1},
            queue=worker_queue(target),
        )  # fmt: skip
    except (OperationalError, redis.RedisError) as exc:
        log.warning("message of job %s not handed on: %s", submitted, exc)
