"""The one Celery task: wake a worker to run the job whose turn is next (fair turns
across keys: imagegen.generation.queue_policy).

The message carries the id of the job whose submission sent it, for the logs only: which
job runs is the store's order (a cancelled job's message runs the next one, or nothing).
"""

import logging

from imagegen.distributed.celery_app import app
from imagegen.distributed.worker import get_runtime

log = logging.getLogger(__name__)


@app.task(name="imagegen.run_next_job", ignore_result=True)
def run_next_job(submitted: str) -> None:
    ran = get_runtime().run_next_job()
    if ran is None:
        log.info("message of job %s: no job waiting (cancelled or taken)", submitted)
