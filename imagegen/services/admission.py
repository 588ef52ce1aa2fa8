"""Whether an API key may queue more images now."""

from typing import NamedTuple

from imagegen.backend import Backend
from imagegen.errors import KeyQueueLimit, KeyRateLimit


def key_admit(
    backend: Backend, *, key_name: str, max_queued: int | None, per_minute: int | None, count: int
) -> None:
    """Whether a key may queue `count` more images now (429 if not): `max_queued`, then
    `per_minute`.

    This check refuses early. Each job's submit holds the limit, in the step that queues it."""
    if max_queued is not None:
        mine = sum(1 for job in backend.jobs.unfinished() if job.key == key_name)
        if mine + count > max_queued:
            raise KeyQueueLimit(max_queued, count)
    if per_minute is not None:
        wait = backend.rates.take(key_name, count, per_minute)
        if wait is not None:
            raise KeyRateLimit(per_minute, count, wait)


class KeyQuota(NamedTuple):
    """The key a request's jobs belong to (None: an open service) and its --max-queued."""

    key_name: str | None
    limit: int | None
