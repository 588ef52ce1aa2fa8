"""Waking the requests that wait on a job when it changes, instead of each asking Redis every
50 ms (16 waiting requests were about 320 round trips a second per replica, each one job read).

The job store announces every transition on one pub/sub channel (store.CHANGED: the job's id,
or `*` when the queue moved and every queued job's position with it). One listener thread per
web process holds the subscription and wakes the requests waiting on that job; each then
reads its job once. A waiting request still reads its job at least every FALLBACK_SECONDS:
a message is lost while the listener reconnects (Redis restarted, a network blip) or when a
transition's announcement fails, and that read then answers within a second instead; it also
applies the lost-worker rule as every read does. After each (re)subscription the listener
wakes every waiting request, so what changed while it was away is read at once.

Why pub/sub and not a blocking pop on a per-job key: several requests wait on one job (a
synchronous request and its joined retries, event streams), and a pop wakes only one; a
blocking pop also holds a connection per waiting request, pub/sub one per process.
"""

import contextlib
import logging
import os
import threading
from collections.abc import Iterator

import redis

from imagegen.distributed.store import CHANGED, EVERY_JOB, decoded

log = logging.getLogger(__name__)

# The longest a waiting request goes without reading its job (the fallback poll).
FALLBACK_SECONDS = 1.0
# How long the listener waits for a message before looking again (it sends nothing then: a
# read on its socket, no Redis command); also how soon it notices it was asked to stop.
LISTEN_SECONDS = 1.0


class ChangeFeed:
    """The process's subscription to job changes, started by the first request that waits
    (in the gunicorn worker, after the fork; a forked child starts its own)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._lock = threading.Lock()
        self._waiting: dict[str, set[threading.Event]] = {}
        self._queue_moves: set[threading.Event] = set()  # also woken when the queue moved
        self._listening_in: int | None = None  # the pid whose listener runs
        self._closed = threading.Event()
        self._lost = False  # the subscription is down (logged once an outage)

    @contextlib.contextmanager
    def watch(self, job_id: str, *, queue_moves: bool = True) -> Iterator[threading.Event]:
        """An event set whenever `job_id` may have changed, while the block runs. Clear it
        before reading the job, then wait on it: a change in between sets it again. Without
        `queue_moves` a move of the queue (a queued job's position) does not set it: a
        request waiting for the job's end has nothing to read then."""
        self._listen_here()
        event = threading.Event()
        with self._lock:
            self._waiting.setdefault(job_id, set()).add(event)
            if queue_moves:
                self._queue_moves.add(event)
        try:
            yield event
        finally:
            with self._lock:
                events = self._waiting.get(job_id, set())
                events.discard(event)
                if not events:
                    self._waiting.pop(job_id, None)
                self._queue_moves.discard(event)

    def wake(self, job_id: str) -> None:
        """Wakes the requests waiting on `job_id`, or on EVERY_JOB those that follow moves
        of the queue."""
        with self._lock:
            if job_id == EVERY_JOB:
                events = list(self._queue_moves)
            else:
                events = list(self._waiting.get(job_id, ()))
        for event in events:
            event.set()

    def wake_all(self) -> None:
        with self._lock:
            events = [event for waiting in self._waiting.values() for event in waiting]
        for event in events:
            event.set()

    def _listen_here(self) -> None:
        with self._lock:
            if self._listening_in == os.getpid():
                return
            self._listening_in = os.getpid()
        threading.Thread(target=self._listen_forever, name="job-changes", daemon=True).start()

    def close(self) -> None:
        """Stops the listener within LISTEN_SECONDS (a process's feed lives as long as it
        does; tests and benches make several)."""
        self._closed.set()

    def _listen_forever(self) -> None:
        while not self._closed.is_set():
            try:
                self._listen()
            except (redis.RedisError, OSError) as exc:  # Redis away: the waiters poll meanwhile
                if self._closed.is_set():
                    return
                if not self._lost:
                    log.warning("job changes: subscription lost, resubscribing: %s", exc)
                self._lost = True
                self._closed.wait(LISTEN_SECONDS)
            except Exception:  # a bug of ours: the listener is the process's only one, so on
                log.exception("job changes: the listener failed; listening again")
                self._lost = True
                self._closed.wait(LISTEN_SECONDS)

    def _listen(self) -> None:
        with contextlib.closing(self.client.pubsub()) as pubsub:
            pubsub.subscribe(CHANGED)
            while not self._closed.is_set():
                message = pubsub.get_message(timeout=LISTEN_SECONDS)
                if message is None:
                    continue
                if message["type"] == "subscribe":  # (re)subscribed: read what was missed
                    if self._lost:
                        log.warning("job changes: subscribed again")
                    self._lost = False
                    self.wake_all()
                elif message["type"] == "message":
                    self.wake(decoded(message["data"]))
