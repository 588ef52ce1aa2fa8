"""The Celery app of distributed mode (JOB_BROKER_URL): web processes send to it, worker
processes (`manage.py run_worker`) take from it.

A message only wakes one worker; the job itself, its order and its state live in the shared
store (imagegen.distributed.store). So the settings favour "never twice" and "no job stuck
behind a busy worker" over anything Celery would redeliver:

- early ack (`task_acks_late` off): a message is acknowledged when its task starts, so a
  worker killed mid-job never has it delivered again; its job is found by its heartbeat
  instead (JOB_HEARTBEAT_TTL) and queued again once with a new message, or failed, saying
  so, when it loses a second worker (imagegen.distributed.store's sweep).
- one job at a time per process (`--pool solo`, concurrency 1) and no prefetch
  (`worker_disable_prefetch`, prefetch multiplier 1): a busy worker holds no message, so an
  idle one takes the next job. KEDA scales the workers on the store's list
  `imagegen:unfinished` (one entry per queued or running job: store.UNFINISHED), not on
  Celery's list `imagegen` of waiting messages, which would remove a worker mid-job.
"""

from celery import Celery
from django.conf import settings

QUEUE = "imagegen"

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
    # What libraries write to stderr (a model load's progress bars) stays plain output, as in
    # the web process, instead of a "WARNING celery.redirected" log line per bar.
    worker_redirect_stdouts=False,
    worker_enable_remote_control=False,
    worker_send_task_events=False,
    broker_connection_retry_on_startup=True,
    broker_connection_max_retries=None,
    # A publish to a frozen Redis gives up as the job store's calls do (JOB_STORE_TIMEOUT_MS),
    # not never; above the workers' 1 s BRPOP, which it would otherwise cut.
    broker_transport_options={
        "socket_connect_timeout": 2,
        "socket_timeout": max(2.0, settings.JOB_STORE_TIMEOUT_MS / 1000),
    },
    # No publish retry: against a frozen Redis kombu's retry reconnects and waits again, past
    # any bound (a publish held 12 s and more, tested); without it a publish gives up within
    # the socket timeout above, and the submit answers 503, the job taken back (a retry of
    # the request, with its Idempotency-Key, is the client's to make).
    task_publish_retry=False,
)
