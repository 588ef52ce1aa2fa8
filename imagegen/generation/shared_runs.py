"""Who waits for which jobs of a synchronous protocol request (OpenAI, AUTOMATIC1111), so an
identical request or a retry joins the jobs already queued instead of queueing them again
(imagegen.services.generation_run_shared). In process the registry is this process's
memory; in distributed mode it is Redis (imagegen.distributed.runs), so a retry that the
ingress sends to another web replica joins too.

A run registered with an Idempotency-Key is `kept`: it stays registered after its last
waiter leaves (until the registry's TTL after its last join), so a retry that comes after
its first attempt gave up on an error joins the job that attempt queued, finished or not,
instead of running it twice (imagegen.services decides which runs may still be joined).

A new run's job ids are chosen and the run registered before its jobs are queued: when the
queueing's answer is lost (the job store stopped answering after it took the job, so the
client was told "try again"), the retry still finds the ids and joins the job that was
queued; had none been queued, the ids name no job and the retry queues anew."""

import secrets
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from core.errors import ServiceError

# Queues the jobs of a new run under the ids given (chosen by the registry: new_job_ids).
Submit = Callable[[list[str]], None]
# Whether a registered run's jobs may still be joined (for a run without a key: any of them
# is still to finish).
Unfinished = Callable[[list[str]], bool]


def refused(error: BaseException) -> bool:
    """Whether a submit's error is the service's refusal, after which none of its jobs is
    queued (a partly queued batch cancels what it queued), unlike a job store that stopped
    answering, which may have taken a job."""
    return isinstance(error, ServiceError) and not error.may_follow_a_queued_job


def new_job_ids(count: int) -> list[str]:
    """Ids for jobs not yet queued, in the form every job's id takes."""
    return [secrets.token_hex(8) for _ in range(count)]


@dataclass(frozen=True)
class SharedRun:
    """The jobs of one request and of the identical ones that joined it."""

    key: str  # the request's identity: its client and its body or Idempotency-Key
    jobs: list[str]
    token: str = field(default_factory=lambda: secrets.token_hex(8))  # this run, not its key
    kept: bool = False  # registered with an Idempotency-Key: outlives its waiters (above)


class RunRegistry(ABC):
    """A registry of runs: this process's (LocalRuns) or every replica's (RedisRuns). The
    join-or-submit rule is written here once; each registry only stores."""

    def join_or_submit(
        self,
        key: str,
        submit: Submit,
        unfinished: Unfinished,
        *,
        count: int = 1,
        keep: bool = False,
    ) -> SharedRun:
        """Joins the key's run while `unfinished` says its jobs may be joined, else submits a
        new one of `count` jobs, registered first (the module's docstring); `keep`: the run
        outlives its waiters (an Idempotency-Key's). One request at a time per key, so two
        requests never both submit for the same key."""
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
        """One request stops waiting; True when it was the last one."""

    @abstractmethod
    def _locked(self, key: str) -> AbstractContextManager[object]:
        """Held while one request joins or submits for `key`."""

    @abstractmethod
    def _find(self, key: str, keep: bool) -> SharedRun | None:
        """The key's registered run, if any."""

    @abstractmethod
    def _register(self, run: SharedRun) -> None:
        """Registers a new run as the key's, before its jobs are queued."""

    @abstractmethod
    def _withdraw(self, run: SharedRun) -> None:
        """Unregisters a run whose jobs were refused, if it is still the key's."""

    @abstractmethod
    def _join(self, run: SharedRun) -> None:
        """Counts one more waiter of `run`, and renews its expiry."""


class LocalRuns(RunRegistry):
    """The registry of one process (the in-process job queue). Kept runs are forgotten
    `ttl_seconds` after their last join, as RedisRuns' keys expire."""

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
