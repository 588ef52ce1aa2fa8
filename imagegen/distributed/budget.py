"""Bounds on what a hung Redis can cost a web process.

Every Redis call ends within JOB_STORE_TIMEOUT_MS, reconnects and retries included. At most
JOB_STORE_MAX_CONCURRENT calls wait at once; the next is refused with 503. So a frozen Redis
never holds every gunicorn thread, and /health keeps one.

redis-py's socket timeouts bound each read, not a call. Against a frozen Redis the connect
succeeds, and each later step waits the whole timeout again. Here each step gets what is left
of the call's budget.

The budget is per call, not per request: job requests wait minutes between calls. A pub/sub
subscription holds its connection for life, so it needs its own client (store_client, no
places)."""

import math
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from redis.connection import (
    Connection,
    SSLConnection,
    UnixDomainSocketConnection,
)
from redis.retry import Retry

from imagegen import metrics
from imagegen.errors import JobStoreBusy

T = TypeVar("T")
SPENT = "no answer from the job store within JOB_STORE_TIMEOUT_MS"
# How long a call waits for a place. A live Redis frees one within milliseconds; a frozen one holds
# it for the whole budget.
PLACE_GRACE = 0.05


class CallBudget:
    """The time a call has left."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        """Raises redis's TimeoutError (the job store's 503) once no time is left."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise redis.TimeoutError(SPENT)
        return left


# This thread's call budget: set when the call takes a connection, cleared when it goes back.
_current = threading.local()


def current_budget() -> CallBudget | None:
    return getattr(_current, "budget", None)


def _capped(timeout: Any, left: float) -> float:
    return min(math.inf if timeout is None else timeout, left)


class _Budgeted:
    """Mixed into redis-py's connections: each socket step waits at most the call's remaining
    budget."""

    budget: CallBudget | None = None

    def _budget(self) -> CallBudget | None:
        return self.budget if self.budget is not None else current_budget()

    def _connect(self) -> Any:
        connection: Any = self  # one of redis-py's connection classes (the other base)
        parent: Any = super()
        budget = self._budget()
        if budget is None:
            return parent._connect()
        configured = connection.socket_connect_timeout, connection.socket_timeout
        left = budget.left()
        connection.socket_connect_timeout = _capped(configured[0], left)
        connection.socket_timeout = _capped(configured[1], left)
        try:
            return parent._connect()
        finally:
            connection.socket_connect_timeout, connection.socket_timeout = configured

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        connection: Any = self
        parent: Any = super()
        budget = self._budget()
        if budget is not None and connection._sock is not None:
            connection._sock.settimeout(_capped(connection.socket_timeout, budget.left()))
        parent.send_packed_command(command, check_health)

    def read_response(self, disable_decoding: bool = False, **options: Any) -> Any:
        connection: Any = self
        parent: Any = super()
        budget = self._budget()
        if budget is None:
            return parent.read_response(disable_decoding, **options)
        try:
            left = budget.left()
        except redis.TimeoutError:
            connection.disconnect()  # the reply it will not read must not meet the next call
            raise
        asked = options.get("timeout")
        if not isinstance(asked, int | float):  # absent, or redis-py's "the socket's own"
            asked = connection.socket_timeout
        options["timeout"] = _capped(asked, left)
        return parent.read_response(disable_decoding, **options)


class BudgetedConnection(_Budgeted, Connection):
    pass


class BudgetedSSLConnection(_Budgeted, SSLConnection):
    pass


class BudgetedUnixConnection(_Budgeted, UnixDomainSocketConnection):
    pass


BUDGETED: dict[type, type] = {
    Connection: BudgetedConnection,
    SSLConnection: BudgetedSSLConnection,
    UnixDomainSocketConnection: BudgetedUnixConnection,
}


class BudgetRetry(Retry):
    """No retry once the budget is spent: it could only fail, after its back-off."""

    def call_with_retry(
        self,
        do: Callable[[], T],
        fail: Callable[[Exception], Any] | Callable[[Exception, int], Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> T:
        def retryable(error: Exception) -> bool:
            budget = current_budget()
            if budget is not None and budget.deadline <= time.monotonic():
                return False
            return is_retryable is None or is_retryable(error)

        try:
            return super().call_with_retry(do, fail, retryable, with_failure_count)
        except (redis.WatchError, redis.exceptions.NoScriptError):
            raise  # a transaction's caller decides again, a script is loaded: no fault
        except redis.RedisError as error:  # the call failed, its retries spent
            metrics.REDIS_ERRORS.labels(error=type(error).__name__).inc()
            raise


class BudgetedPool(redis.ConnectionPool):
    """Each call gets its budget; with `max_waiting`, a place too, or JobStoreBusy at once."""

    def __init__(
        self,
        *,
        budget_seconds: float,
        max_waiting: int | None = None,
        connection_class: type = Connection,
        **kwargs: Any,
    ) -> None:
        super().__init__(connection_class=BUDGETED[connection_class], **kwargs)
        self.budget_seconds = budget_seconds
        self.places = None if max_waiting is None else threading.BoundedSemaphore(max_waiting)

    def get_connection(self, *args: Any, **options: Any) -> Any:
        if self.places is not None and not self.places.acquire(timeout=PLACE_GRACE):
            raise JobStoreBusy()
        budget = _current.budget = CallBudget(self.budget_seconds)
        try:
            connection: Any = super().get_connection(*args, **options)
        except BaseException:
            self._give_back(budget)
            raise
        connection.budget = budget
        return connection

    def release(self, connection: Any) -> None:
        budget = getattr(connection, "budget", None)
        connection.budget = None
        super().release(connection)
        if budget is not None:
            self._give_back(budget)

    def _give_back(self, budget: CallBudget) -> None:
        if current_budget() is budget:
            _current.budget = None
        if self.places is not None:
            self.places.release()
