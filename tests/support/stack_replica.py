"""A web replica of distributed mode served here (tests/support/distributed.py
`replica_here`) on the session's shared stack, as often as tests need one: each replica_here
closes the Celery app's broker pools at its end, while kombu keeps them, and the producer
pool on them, in registries of its own keyed by the broker's address, so a later replica
on the same Redis would send through a closed pool ("Acquire on closed pool"). Those closed
pools are dropped before and after, so kombu makes new ones."""

from collections.abc import Iterator
from contextlib import contextmanager

from kombu import pools

from tests.support.distributed import Stack, replica_here
from tests.support.in_process import LoopbackApp


def _drop_closed_pools() -> None:
    """kombu's registries without the closed connection pools, nor the producer pools on them."""
    for key, pool in list(pools.connections.items()):
        if pool._closed:
            dict.pop(pools.connections, key, None)
    for key, pool in list(pools.producers.items()):
        if pool._closed or pool.connections._closed:
            dict.pop(pools.producers, key, None)


@contextmanager
def stack_replica_here(stack: Stack, **env: str) -> Iterator[LoopbackApp]:
    """A web replica of `env` over the stack's settings, served here for the block."""
    _drop_closed_pools()
    try:
        with replica_here(**{**stack.env, **env}) as app:
            yield app
    finally:
        _drop_closed_pools()
