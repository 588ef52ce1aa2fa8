"""Bounds on what a hung job store (Redis) can cost a web process: every Redis call ends within
JOB_STORE_TIMEOUT_MS whatever Redis does (frozen, or a half-open connection that answers
nothing), its reconnects, handshake and retries included; and at most JOB_STORE_MAX_CONCURRENT
calls wait on it at once, the next refused at once (503, after PLACE_GRACE), so a frozen Redis
never holds every gunicorn thread and /health keeps one.

Why redis-py's own socket timeouts are not enough: they bound each read and each connect, not
a call. A call that times out disconnects and retries; against a frozen Redis the TCP connect
succeeds (the kernel answers for it), and the handshake, the health check and the command then
each wait the whole socket timeout again, so a frozen Redis would hold requests as long as it
is frozen. Here each of those steps gets only what is left of the call's budget, and no retry
starts once it is spent.

Why per call and not one deadline per request (as the todos' pymongo.timeout): job requests
wait for their jobs for minutes between calls (a synchronous /generate, the protocol routes,
event streams); such a deadline would have to be renewed by every wait. A request's first call
that Redis does not answer in time ends the request with 503, so a job route answers within
the budget (and the retries' back-off, under a second) of Redis going silent.

The budget runs from the call taking its connection from the pool until it gives it back. A
subscription (pub/sub) holds its connection, and a place, for its whole life: its reads give up
once the budget from subscribing is spent, so a wait for notifications wants a blocking call of
its own timeout below the budget, or a client of its own (store_client, no places).
"""

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
# How long a call waits for a place before it is refused. A Redis that answers gives one back
# within milliseconds (requests waiting for their jobs look at them 20 times a second, so
# with few places they meet); a frozen one holds them for the whole budget.
PLACE_GRACE = 0.05


class CallBudget:
    """The time a call has left."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds left; raises redis's TimeoutError (the job store's 503) once none are."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise redis.TimeoutError(SPENT)
        return left


# The budget of the call this thread is making: set when the call takes its connection from
# the pool (whose connect and handshake it covers), cleared when the connection goes back.
_current = threading.local()


def current_budget() -> CallBudget | None:
    return getattr(_current, "budget", None)


def _capped(timeout: Any, left: float) -> float:
    return min(math.inf if timeout is None else timeout, left)


class _Budgeted:
    """Mixed into redis-py's connection classes (TCP, TLS, Unix socket): each socket step of a
    call waits at most what is left of the call's budget."""

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
    """redis-py's retry, but none once the call's budget is spent (a retry then could only
    fail at once, after its back-off)."""

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
    """The pool of a process's one Redis client: each call taking a connection gets its
    budget, and with `max_waiting` (web processes) a place among those that may wait on Redis
    at once, or JobStoreBusy at once."""

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
