"""The Celery app of distributed mode: web processes send, workers take.

A message only wakes a worker; the job lives in the store. So the settings favour "never
twice" and "no job stuck behind a busy worker".

- Early ack. A killed worker's message is never redelivered; the sweep requeues its job once.
- One job per process and no prefetch. A busy worker holds no message."""

from celery import Celery
from django.conf import settings

QUEUE = "imagegen"


def worker_queue(name: str) -> str:
    """A worker's own queue beside QUEUE: a message handed to it wakes it and no other."""
    return f"{QUEUE}.worker.{name}"


app = Celery("imagegen", set_as_current=False)
app.conf.update(
    broker_url=settings.JOB_BROKER_URL,
    task_default_queue=QUEUE,
    task_ignore_result=True,
    task_acks_late=False,
    worker_prefetch_multiplier=1,
    worker_disable_prefetch=True,
    worker_concurrency=1,
    worker_pool="solo",
    worker_hijack_root_logger=False,
    # Library output on stderr (progress bars) stays plain, not a celery.redirected warning per bar.
    worker_redirect_stdouts=False,
    worker_enable_remote_control=False,
    worker_send_task_events=False,
    broker_connection_retry_on_startup=True,
    broker_connection_max_retries=None,
    # A publish to a frozen Redis gives up as the store's calls do; above the workers' 1 s BRPOP.
    broker_transport_options={
        "socket_connect_timeout": 2,
        "socket_timeout": max(2.0, settings.JOB_STORE_TIMEOUT_MS / 1000),
    },
    # No publish retry: kombu's retry against a frozen Redis waits past any bound (12 s and more).
    # Without it the submit answers 503 and takes the job back.
    task_publish_retry=False,
)
