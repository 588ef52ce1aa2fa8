"""Who waits for which jobs of a synchronous OpenAI or A1111 request.

An identical request or a retry joins its twin's jobs instead of queueing them again. Ids are
registered before queueing, so a retry finds a job whose queueing answer was lost."""

import secrets
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from core.errors import ServiceError

# Queues a new run's jobs under the ids new_job_ids chose.
Submit = Callable[[list[str]], None]
# Whether a run's jobs may still be joined (without a key: any is still to finish).
Unfinished = Callable[[list[str]], bool]


def refused(error: BaseException) -> bool:
    """Whether the service refused, so nothing is queued; a silent store may have taken a job."""
    return isinstance(error, ServiceError) and not error.may_follow_a_queued_job


def new_job_ids(count: int) -> list[str]:
    """Ids in the form every job's id takes."""
    return [secrets.token_hex(8) for _ in range(count)]


@dataclass(frozen=True)
class SharedRun:
    """The jobs of one request and of the identical ones that joined it."""

    key: str  # the request's identity: its client and its body or Idempotency-Key
    jobs: list[str]
    token: str = field(default_factory=lambda: secrets.token_hex(8))  # this run, not its key
    kept: bool = False  # registered with an Idempotency-Key: outlives its waiters (above)


class RunRegistry(ABC):
    """The join-or-submit rule, written once; each registry only stores."""

    def join_or_submit(
        self,
        key: str,
        submit: Submit,
        unfinished: Unfinished,
        *,
        count: int = 1,
        keep: bool = False,
    ) -> SharedRun:
        """Joins the key's run while it may be joined, else registers and submits a new one.

        One request at a time per key, so two never both submit."""
        with self._locked(key):
            run = self._find(key, keep)
            if run is None or not unfinished(run.jobs):
                run = SharedRun(key, new_job_ids(count), kept=keep)
                self._register(run)
                try:
                    submit(run.jobs)
                except Exception as error:
                    if refused(error):  # nothing queued: nothing for a retry to join
                        self._withdraw(run)
                    raise
            self._join(run)
            return run

    @abstractmethod
    def leave(self, run: SharedRun) -> bool:
        """True when the last waiter left."""

    @abstractmethod
    def _locked(self, key: str) -> AbstractContextManager[object]:
        """Held while one request joins or submits for `key`."""

    @abstractmethod
    def _find(self, key: str, keep: bool) -> SharedRun | None:
        """The key's run, if any."""

    @abstractmethod
    def _register(self, run: SharedRun) -> None:
        """Before its jobs are queued."""

    @abstractmethod
    def _withdraw(self, run: SharedRun) -> None:
        """Unregisters a refused run, if it is still the key's."""

    @abstractmethod
    def _join(self, run: SharedRun) -> None:
        """One more waiter; renews the expiry."""


class LocalRuns(RunRegistry):
    """One process's registry. Kept runs expire `ttl_seconds` after their last join, as in Redis."""

    def __init__(self, ttl_seconds: float = 3600) -> None:
        self.ttl = ttl_seconds
        self._lock = threading.Lock()
        self._current: dict[str, SharedRun] = {}
        self._waiters: dict[str, int] = {}  # by run token
        self._expires: dict[str, float] = {}  # kept runs without waiters, by key

    def _locked(self, key: str) -> threading.Lock:
        return self._lock

    def _find(self, key: str, keep: bool) -> SharedRun | None:
        self._forget_expired()
        return self._current.get(key)

    def _register(self, run: SharedRun) -> None:
        self._current[run.key] = run
        self._expires[run.key] = time.monotonic() + self.ttl

    def _withdraw(self, run: SharedRun) -> None:
        del self._current[run.key], self._expires[run.key]

    def _join(self, run: SharedRun) -> None:
        self._waiters[run.token] = self._waiters.get(run.token, 0) + 1
        self._expires[run.key] = time.monotonic() + self.ttl

    def leave(self, run: SharedRun) -> bool:
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
