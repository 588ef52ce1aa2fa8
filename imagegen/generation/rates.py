"""How many images each API key has started this minute (`--per-minute`): the interface both
job modes answer, and the in-process counter.

A fixed window per clock minute: simple to share (one Redis counter a key and minute in
distributed mode: imagegen.distributed.rates) and never more than the limit within a window;
across a window's edge a key may start up to twice its limit in a minute's span, which a
limit meant against floods rather than to the image can bear.
"""

import threading
import time
from typing import Protocol

WINDOW_SECONDS = 60


def window(now: float) -> tuple[int, int]:
    """The window `now` falls in, and the whole seconds until it ends (at least 1)."""
    index = int(now // WINDOW_SECONDS)
    return index, max(1, int((index + 1) * WINDOW_SECONDS - now + 0.999))


class RateCounter(Protocol):
    def take(self, key: str, count: int, limit: int) -> int | None:
        """Counts `count` images for `key` in this window when that stays within `limit`
        and answers None; else counts nothing and answers the seconds until the window
        ends (the Retry-After)."""


class LocalRates:
    """This process's counts: in-process mode has one web process taking jobs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, tuple[int, int]] = {}  # key -> (window, images)

    def take(self, key: str, count: int, limit: int) -> int | None:
        index, remaining = window(time.time())
        with self._lock:
            seen, used = self._counts.get(key, (index, 0))
            if seen != index:
                used = 0
            if used + count > limit:
                return remaining
            self._counts[key] = (index, used + count)
            return None
