"""The one Celery task: wake a worker to run the job whose turn is next.

The job id in the message is for the logs only: the store's order decides which job runs. A
worker that finds no job for itself while jobs wait (pick leaves them to an idle worker holding
their model, or WORKER_MODELS leaves them out) sends the message on, up to RESENDS times, so a
worker that takes one wakes; past that, an idle worker's beat finds its job
(imagegen.distributed.worker RESCUE_BEATS)."""

import logging

import redis
from kombu.exceptions import OperationalError

from imagegen.distributed.celery_app import app
from imagegen.distributed.worker import get_runtime

log = logging.getLogger(__name__)

RESENDS = 3


@app.task(name="imagegen.run_next_job", ignore_result=True)
def run_next_job(submitted: str, resent: int = 0) -> None:
    runtime = get_runtime()
    ran = runtime.run_next_job()
    if ran is not None:
        return
    if resent < RESENDS and runtime.store.next_queued() is not None:
        log.info("message of job %s: the jobs waiting are for other workers; sent on", submitted)
        try:
            app.send_task("imagegen.run_next_job", args=[submitted], kwargs={"resent": resent + 1})
        except (OperationalError, redis.RedisError) as exc:
            log.warning("message of job %s not sent on: %s", submitted, exc)
        return
    log.info("message of job %s: no job waiting (cancelled or taken)", submitted)
