"""The Redis clients and job store of distributed mode, made by the backend that holds them.

Nothing here is cached: a backend built again (a test's, or one of other settings) talks to
the Redis of its own settings."""

import logging

import redis
from django.conf import settings
from redis.backoff import ExponentialBackoff

from imagegen.distributed.budget import BudgetedPool, BudgetRetry
from imagegen.distributed.store import JobStore

log = logging.getLogger(__name__)


def store_client(url: str, *, timeout: float, max_waiting: int | None) -> redis.Redis:
    """Every call ends within `timeout` seconds; `max_waiting` bounds the calls waiting at once.

    The pool reconnects by itself, so no restart is needed."""
    pool = BudgetedPool.from_url(
        url,
        budget_seconds=timeout,
        max_waiting=max_waiting,
        socket_connect_timeout=min(2.0, timeout),
        socket_timeout=timeout,
        health_check_interval=15,
        # Two quick retries ride over a blip; none starts once the budget is spent.
        retry=BudgetRetry(ExponentialBackoff(cap=0.5, base=0.1), 2),
    )
    return redis.Redis(connection_pool=pool)


def redis_client() -> redis.Redis:
    """In a web process each waiting call holds a request thread, hence JOB_STORE_MAX_CONCURRENT."""
    return store_client(
        settings.JOB_BROKER_URL,
        timeout=settings.JOB_STORE_TIMEOUT_MS / 1000,
        max_waiting=settings.JOB_STORE_MAX_CONCURRENT,
    )


def listener_client() -> redis.Redis:
    """The change feed's own connection, with no places and no call budget.

    A subscription holds its connection for life. On redis_client() it would keep a place
    forever, and its budget would cut it off every few seconds."""
    timeout = settings.JOB_STORE_TIMEOUT_MS / 1000
    return redis.Redis.from_url(
        settings.JOB_BROKER_URL,
        socket_connect_timeout=min(2.0, timeout),
        socket_timeout=timeout,
        health_check_interval=15,
    )


def wake_a_worker(job_id: str) -> None:
    """A message for a job requeued after its worker was lost.

    If it cannot be sent, the job keeps its head place and the next job's message runs it."""
    from kombu.exceptions import OperationalError

    from imagegen.distributed.celery_app import app

    try:
        app.send_task("imagegen.run_next_job", args=[job_id])
    except (OperationalError, redis.RedisError) as exc:
        log.warning("job %s: queued again, but no worker was told: %s", job_id, exc)


def job_store(client: redis.Redis) -> JobStore:
    return JobStore(client, heartbeat_ttl=settings.JOB_HEARTBEAT_TTL, wake=wake_a_worker)
