"""Who waits for which jobs of a synchronous protocol request (OpenAI, AUTOMATIC1111), so an
identical request or a retry joins the jobs already queued instead of queueing them again
(imagegen.services.generation_run_shared). In process the registry is this process's
memory; in distributed mode it is Redis (imagegen.distributed.runs), so a retry that the
ingress sends to another web replica joins too."""

import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

Submit = Callable[[], list[str]]  # queues the jobs of a new run; returns their ids
Unfinished = Callable[[list[str]], bool]  # whether any of these jobs is still to finish


@dataclass(frozen=True)
class SharedRun:
    """The jobs of one request and of the identical ones that joined it."""

    key: str  # the request's identity: its client and its body or Idempotency-Key
    jobs: list[str]
    token: str = field(default_factory=lambda: secrets.token_hex(8))  # this run, not its key


class RunRegistry(Protocol):
    """mypy checks both (LocalRuns, RedisRuns) against it where imagegen.backend.runs()
    returns them."""

    def join_or_submit(self, key: str, submit: Submit, unfinished: Unfinished) -> SharedRun: ...

    def leave(self, run: SharedRun) -> bool: ...


class LocalRuns:
    """The registry of one process (the in-process job queue)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: dict[str, SharedRun] = {}
        self._waiters: dict[str, int] = {}  # by run token

    def join_or_submit(self, key: str, submit: Submit, unfinished: Unfinished) -> SharedRun:
        """Joins the key's run while any of its jobs is unfinished, else submits a new one."""
        with self._lock:
            run = self._current.get(key)
            if run is None or not unfinished(run.jobs):
                run = self._current[key] = SharedRun(key, submit())
            self._waiters[run.token] = self._waiters.get(run.token, 0) + 1
            return run

    def leave(self, run: SharedRun) -> bool:
        """One request stops waiting; True when it was the last one."""
        with self._lock:
            self._waiters[run.token] -= 1
            if self._waiters[run.token]:
                return False
            del self._waiters[run.token]
            if self._current.get(run.key) == run:
                del self._current[run.key]
            return True
