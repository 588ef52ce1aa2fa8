"""The one Redis client and job store of a process in distributed mode (JOB_BROKER_URL)."""

import logging
from functools import cache

import redis
from django.conf import settings
from redis.backoff import ExponentialBackoff

from imagegen.distributed.budget import BudgetedPool, BudgetRetry
from imagegen.distributed.store import JobStore

log = logging.getLogger(__name__)


def store_client(url: str, *, timeout: float, max_waiting: int | None) -> redis.Redis:
    """Every call ends within `timeout` seconds whatever Redis does (imagegen.distributed.
    budget); with `max_waiting`, no more than that many calls wait on Redis at once. The pool
    reconnects by itself when Redis is back, so no restart is needed."""
    pool = BudgetedPool.from_url(
        url,
        budget_seconds=timeout,
        max_waiting=max_waiting,
        socket_connect_timeout=min(2.0, timeout),
        socket_timeout=timeout,
        health_check_interval=15,
        # Two quick retries ride over a blip (a restart: 503 within about a second), and none
        # starts once the call's budget is spent.
        retry=BudgetRetry(ExponentialBackoff(cap=0.5, base=0.1), 2),
    )
    return redis.Redis(connection_pool=pool)


@cache
def redis_client() -> redis.Redis:
    """In a web process each call waiting on Redis holds a request thread, hence the bound
    (JOB_STORE_MAX_CONCURRENT); a worker's few threads stay far below it."""
    return store_client(
        settings.JOB_BROKER_URL,
        timeout=settings.JOB_STORE_TIMEOUT_MS / 1000,
        max_waiting=settings.JOB_STORE_MAX_CONCURRENT,
    )


@cache
def listener_client() -> redis.Redis:
    """The change feed's own connection (imagegen.distributed.changes). A subscription holds
    its connection for its whole life: on redis_client() it would take a place among the calls
    waiting on Redis for good, and its call budget would run out a few seconds after it
    subscribed, cutting it off over and over. Here its socket timeouts bound each read, and a
    frozen Redis costs the waiting requests only their fallback read a second."""
    timeout = settings.JOB_STORE_TIMEOUT_MS / 1000
    return redis.Redis.from_url(
        settings.JOB_BROKER_URL,
        socket_connect_timeout=min(2.0, timeout),
        socket_timeout=timeout,
        health_check_interval=15,
    )


def wake_a_worker(job_id: str) -> None:
    """The message that makes one worker take the job whose turn is next, for a job queued again
    after its worker was lost. Not sent (Redis away again): the job keeps its place at the
    head of the queue, and the next job's message runs it."""
    from kombu.exceptions import OperationalError

    from imagegen.distributed.celery_app import app

    try:
        app.send_task("imagegen.run_next_job", args=[job_id])
    except (OperationalError, redis.RedisError) as exc:
        log.warning("job %s: queued again, but no worker was told: %s", job_id, exc)


@cache
def job_store() -> JobStore:
    return JobStore(redis_client(), heartbeat_ttl=settings.JOB_HEARTBEAT_TTL, wake=wake_a_worker)
