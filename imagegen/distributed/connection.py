"""The one Redis client and job store of a process in distributed mode (JOB_BROKER_URL)."""

import logging
from functools import cache

import redis
from django.conf import settings
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from imagegen.distributed.store import JobStore

log = logging.getLogger(__name__)


@cache
def redis_client() -> redis.Redis:
    """Short timeouts: a request must answer 503 soon when Redis is away, not hang; the
    pool reconnects by itself when it is back, so no restart is needed."""
    return redis.Redis.from_url(
        settings.JOB_BROKER_URL,
        socket_connect_timeout=2,
        socket_timeout=5,
        health_check_interval=15,
        # Two quick retries ride over a blip; an outage answers 503 within about a second.
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.1), 2),
    )


def wake_a_worker(job_id: str) -> None:
    """The message that makes one worker take the oldest waiting job, for a job queued again
    after its worker was lost. Not sent (Redis away again): the job keeps its place at the
    head of the queue, and the next job's message runs it."""
    from kombu.exceptions import OperationalError

    from config.celery import app

    try:
        app.send_task("imagegen.run_next_job", args=[job_id])
    except (OperationalError, redis.RedisError) as exc:
        log.warning("job %s: queued again, but no worker was told: %s", job_id, exc)


@cache
def job_store() -> JobStore:
    return JobStore(redis_client(), heartbeat_ttl=settings.JOB_HEARTBEAT_TTL, wake=wake_a_worker)
