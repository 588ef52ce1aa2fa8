"""`/health` asked again and again while a test does something else, timing each answer: what
a client beside the one under test would see, while that one sends hostile input or holds
connections open."""

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import requests


@dataclass
class HealthWatch:
    url: str
    waits: list[float] = field(default_factory=list)  # seconds each answer took
    failures: list[str] = field(default_factory=list)  # what went wrong, one line each

    @property
    def longest(self) -> float:
        return max(self.waits, default=0.0)


@contextmanager
def health_beside(url: str, *, every: float = 0.1, timeout: float = 10.0) -> Iterator[HealthWatch]:
    """Asks `url` (a /health) every `every` seconds until the block ends; each answer's wait
    goes into the watch (a wait past `timeout` counts as `timeout`, with a failure)."""
    watch = HealthWatch(url)
    stop = threading.Event()

    def ask() -> None:
        with requests.Session() as session:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    response = session.get(url, timeout=timeout)
                    if response.status_code != 200:
                        watch.failures.append(f"/health answered {response.status_code}")
                except requests.RequestException as exc:
                    watch.failures.append(f"/health: {exc}")
                watch.waits.append(time.monotonic() - started)
                stop.wait(every)

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    try:
        yield watch
    finally:
        stop.set()
        thread.join(timeout + 5)
