"""The one Celery task: wake a worker to run the job whose turn is next.

The job id in the message is for the logs only: the store's order decides which job runs."""

import logging

from imagegen.distributed.celery_app import app
from imagegen.distributed.worker import get_runtime

log = logging.getLogger(__name__)


@app.task(name="imagegen.run_next_job", ignore_result=True)
def run_next_job(submitted: str) -> None:
    ran = get_runtime().run_next_job()
    if ran is None:
        log.info("message of job %s: no job waiting (cancelled or taken)", submitted)
