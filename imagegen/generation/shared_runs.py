"""Who waits for which jobs of a synchronous protocol request (OpenAI, AUTOMATIC1111), so an
identical request or a retry joins the jobs already queued instead of queueing them again
(imagegen.services.generation_run_shared). In process the registry is this process's
memory; in distributed mode it is Redis (imagegen.distributed.runs), so a retry that the
ingress sends to another web replica joins too.

A run registered with an Idempotency-Key is `kept`: it stays registered after its last
waiter leaves (until the registry's TTL after its last join), so a retry that comes after
its first attempt gave up on an error joins the job that attempt queued, finished or not,
instead of running it twice (imagegen.services decides which runs may still be joined)."""

import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

Submit = Callable[[], list[str]]  # queues the jobs of a new run; returns their ids
# Whether a registered run's jobs may still be joined (for a run without a key: any of them
# is still to finish).
Unfinished = Callable[[list[str]], bool]


@dataclass(frozen=True)
class SharedRun:
    """The jobs of one request and of the identical ones that joined it."""

    key: str  # the request's identity: its client and its body or Idempotency-Key
    jobs: list[str]
    token: str = field(default_factory=lambda: secrets.token_hex(8))  # this run, not its key
    kept: bool = False  # registered with an Idempotency-Key: outlives its waiters (above)


class RunRegistry(Protocol):
    """mypy checks both (LocalRuns, RedisRuns) against it where imagegen.backend.runs()
    returns them."""

    def join_or_submit(
        self, key: str, submit: Submit, unfinished: Unfinished, *, keep: bool = False
    ) -> SharedRun: ...

    def leave(self, run: SharedRun) -> bool: ...


class LocalRuns:
    """The registry of one process (the in-process job queue). Kept runs are forgotten
    `ttl_seconds` after their last join, as RedisRuns' keys expire."""

    def __init__(self, ttl_seconds: float = 3600) -> None:
        self.ttl = ttl_seconds
        self._lock = threading.Lock()
        self._current: dict[str, SharedRun] = {}
        self._waiters: dict[str, int] = {}  # by run token
        self._expires: dict[str, float] = {}  # kept runs without waiters, by key

    def join_or_submit(
        self, key: str, submit: Submit, unfinished: Unfinished, *, keep: bool = False
    ) -> SharedRun:
        """Joins the key's run while `unfinished` says its jobs may be joined, else submits a
        new one; `keep`: the run outlives its waiters (an Idempotency-Key's)."""
        with self._lock:
            self._forget_expired()
            run = self._current.get(key)
            if run is None or not unfinished(run.jobs):
                run = self._current[key] = SharedRun(key, submit(), kept=keep)
            self._waiters[run.token] = self._waiters.get(run.token, 0) + 1
            self._expires[key] = time.monotonic() + self.ttl
            return run

    def leave(self, run: SharedRun) -> bool:
        """One request stops waiting; True when it was the last one."""
        with self._lock:
            self._waiters[run.token] -= 1
            if self._waiters[run.token]:
                return False
            del self._waiters[run.token]
            if self._current.get(run.key) == run and not run.kept:
                del self._current[run.key]
            return True

    def _forget_expired(self) -> None:
        now = time.monotonic()
        for key, expires in list(self._expires.items()):
            run = self._current.get(key)
            if run is None or (expires <= now and not self._waiters.get(run.token)):
                self._expires.pop(key)
                if run is not None:
                    del self._current[key]
