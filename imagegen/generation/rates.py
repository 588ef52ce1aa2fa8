"""Images each API key started this minute (`--per-minute`), in a fixed window per clock minute.

Across a window's edge a key may start twice its limit in 60 s; a limit against floods bears
it."""

import threading
import time
from typing import Protocol

WINDOW_SECONDS = 60


def window(now: float) -> tuple[int, int]:
    """The window `now` falls in, and whole seconds until it ends (at least 1)."""
    index = int(now // WINDOW_SECONDS)
    return index, max(1, int((index + 1) * WINDOW_SECONDS - now + 0.999))


class RateCounter(Protocol):
    def take(self, key: str, count: int, limit: int) -> int | None:
        """Counts `count` images if that stays within `limit`, and answers None.

        Otherwise counts nothing and answers the seconds until the window ends (the Retry-After)."""


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
