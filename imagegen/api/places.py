"""Places for requests that hold a server thread while they wait: synchronous generations
(SYNC_WAITERS_MAX) and event streams (EVENT_STREAMS_MAX, KEY_STREAMS_MAX per key). A request
without a place is refused at once (503 with Retry-After), so waiting clients never hold
every thread and /health and the other routes keep theirs. Threads are the server's, so
their places are kept here, beside the routes, not in the services."""

import contextlib
import threading
from collections.abc import Callable, Iterator
from functools import cache

from django.conf import settings

from imagegen import metrics, services
from imagegen.backend import Backend
from imagegen.errors import EventStreamsBusy, KeyStreamsBusy, SyncWaitersBusy
from imagegen.generation.requests import GenerationRequest


@cache
def _waiter_places(size: int) -> threading.BoundedSemaphore:
    return threading.BoundedSemaphore(size)


@contextlib.contextmanager
def sync_waiter_place(
    backend: Backend | None = None, request: GenerationRequest | None = None
) -> Iterator[None]:
    """One of SYNC_WAITERS_MAX places, held for the block (a synchronous generation, or an
    MCP tool that waits for its image itself), or SyncWaitersBusy at once. Each waiter holds
    a thread until its images are made, and joiners of one job (identical requests, one
    Idempotency-Key) are no exception, so without a bound below the thread count a few
    clients hold them all. The bound is read per request. A refused `request`'s edit inputs
    (stored already) go: nothing was queued that names them."""
    places = _waiter_places(settings.SYNC_WAITERS_MAX)
    if not places.acquire(blocking=False):
        if backend is not None and request is not None:
            services.inputs_release(backend, request)
        raise SyncWaitersBusy()
    try:
        yield
    finally:
        places.release()


@cache
def _stream_places(size: int) -> threading.BoundedSemaphore:
    return threading.BoundedSemaphore(size)


_key_streams: dict[str, int] = {}  # open event streams of each named key, in this process
_key_streams_lock = threading.Lock()


def event_stream_place(key: str | None = None) -> Callable[[], None]:
    """Takes one of the EVENT_STREAMS_MAX places for an open event stream, or refuses at
    once (503 with Retry-After): each stream holds a worker thread for minutes, and a bound
    below the thread count keeps threads for /health and every other route. A named `key`
    (apikeys.auth.stream_key) holds at most KEY_STREAMS_MAX of them, so one key cannot take
    every place. Returns what gives the place back (once, however often it is called)."""
    if key is not None:
        with _key_streams_lock:
            if _key_streams.get(key, 0) >= settings.KEY_STREAMS_MAX:
                raise KeyStreamsBusy()
            _key_streams[key] = _key_streams.get(key, 0) + 1
    places = _stream_places(settings.EVENT_STREAMS_MAX)
    if not places.acquire(blocking=False):
        _give_back_key_stream(key)
        raise EventStreamsBusy()
    metrics.EVENT_STREAMS_OPEN.inc()
    once = threading.Lock()

    def give_back() -> None:
        if once.acquire(blocking=False):
            places.release()
            _give_back_key_stream(key)
            metrics.EVENT_STREAMS_OPEN.dec()

    return give_back


def _give_back_key_stream(key: str | None) -> None:
    if key is None:
        return
    with _key_streams_lock:
        left = _key_streams.pop(key, 1) - 1
        if left:
            _key_streams[key] = left
