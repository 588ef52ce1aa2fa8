"""The one Redis client and job store of a process in distributed mode (JOB_BROKER_URL)."""

from functools import cache

import redis
from django.conf import settings
from redis.backoff import ExponentialBackoff

from imagegen.distributed.budget import BudgetedPool, BudgetRetry
from imagegen.distributed.store import JobStore


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
def job_store() -> JobStore:
    return JobStore(redis_client(), heartbeat_ttl=settings.JOB_HEARTBEAT_TTL)
