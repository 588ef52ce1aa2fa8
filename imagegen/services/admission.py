"""Whether an API key may queue more images now: its share of the queue and its rate."""

from typing import NamedTuple

from imagegen.backend import Backend
from imagegen.errors import KeyQueueLimit, KeyRateLimit


def key_admit(
    backend: Backend, *, key_name: str, max_queued: int | None, per_minute: int | None, count: int
) -> None:
    """Whether an API key may queue `count` more images now (429 if not): `max_queued`
    against its jobs queued or running on the board (every replica's in distributed mode),
    then `per_minute` against its count this minute, counted here when admitted. The first
    answers a request for more than the key has left before anything is queued; what holds
    the limit is each job's submit, which counts the key's jobs in the step that queues it
    (`key_limit`), so requests of one key at the same instant cannot pass it together. The
    second is exact (imagegen.generation.rates)."""
    if max_queued is not None:
        mine = sum(1 for job in backend.jobs.unfinished() if job.key == key_name)
        if mine + count > max_queued:
            raise KeyQueueLimit(max_queued, count)
    if per_minute is not None:
        wait = backend.rates.take(key_name, count, per_minute)
        if wait is not None:
            raise KeyRateLimit(per_minute, count, wait)


class KeyQuota(NamedTuple):
    """The name of the API key a request's jobs belong to (None: an open service) and its
    --max-queued, which each job's submit counts (JobBoard.submit's `key_limit`)."""

    key_name: str | None
    limit: int | None
