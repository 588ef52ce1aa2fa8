"""The senders: a thread turning ended jobs into deliveries, and a bounded pool trying them.

They never run in request or generation threads. A dead receiver costs one of WEBHOOK_SENDERS
threads for a try's timeout, nothing else. Every web process starts them and picks up what a
stopped one left; claims keep two processes from sending one try twice."""

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from core.timestamps import iso_ms
from imagegen import metrics
from imagegen.generation.job_board import FINISHED, JobBoard, JobView
from imagegen.webhooks.addresses import Allowance, UrlRefused
from imagegen.webhooks.outbox import Delivery, Outbox, Watch, delivery_id
from imagegen.webhooks.sending import post
from imagegen.webhooks.signing import signed_headers

log = logging.getLogger(__name__)

FIRST_RETRY = 1.0  # seconds after the first failed try
LONGEST_WAIT = 300.0  # between two tries, at most
JITTER = 0.25
TICK = 0.5  # how often the outbox is read for ended jobs and due deliveries


def next_wait(tries: int, *, rng: Callable[[float, float], float] = random.uniform) -> float:
    """1 s, then doubling, each within +-25 %, never more than 5 minutes."""
    base = FIRST_RETRY * 2 ** min(tries - 1, 30)
    return min(LONGEST_WAIT, base * rng(1 - JITTER, 1 + JITTER))


@dataclass(frozen=True)
class Policy:
    allow: Allowance
    retry_seconds: float  # WEBHOOK_RETRY_SECONDS: given up once this old
    senders: int  # WEBHOOK_SENDERS


class Dispatcher:
    """`describe` makes the event's `data`; `secrets_for` gives a signer's secrets."""

    def __init__(
        self,
        outbox: Outbox,
        board: JobBoard,
        policy: Policy,
        *,
        describe: Callable[[JobView, Watch], dict[str, Any]],
        secrets_for: Callable[[str], list[str]],
    ) -> None:
        self.outbox, self.board, self.policy = outbox, board, policy
        self.describe, self.secrets_for = describe, secrets_for
        self._pool = ThreadPoolExecutor(policy.senders, thread_name_prefix="webhook")
        self._busy = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="webhooks", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while True:
            try:
                self.tick()
            except Exception as exc:  # the outbox unreachable a while: the next tick tries again
                log.warning("webhooks: the outbox or the job board did not answer: %r", exc)
            time.sleep(TICK)

    def tick(self) -> None:
        for watch in self.outbox.watches():
            self._notice(watch)
        with self._lock:
            free = self.policy.senders - self._busy
        if free <= 0:
            return
        for delivery in self.outbox.claim(time.time(), free):
            with self._lock:
                self._busy += 1
            self._pool.submit(self._try, delivery)

    def _notice(self, watch: Watch) -> None:
        view = self.board.lookup(watch.job_id)
        if view is None:
            log.warning("webhooks: job %s is gone before it was seen ending", watch.job_id)
            self.outbox.unwatch(watch.job_id)
            return
        if view.state not in FINISHED:
            return
        event = f"job.{view.state.value}"
        now = time.time()
        body = {"type": event, "timestamp": iso_ms(datetime.fromtimestamp(now, UTC)),
                "data": self.describe(view, watch)}  # fmt: skip
        delivery = Delivery(
            id=delivery_id(view.id), job_id=view.id, url=watch.url, signer=watch.signer,
            event=event, body=_json(body), created=now, due=now,
        )  # fmt: skip
        if self.outbox.enqueue(delivery):
            metrics.WEBHOOK_EVENTS.labels(event=event).inc()

    def _try(self, delivery: Delivery) -> None:
        try:
            self._send(delivery)
        except Exception:
            log.exception("webhooks: delivery %s failed to be settled", delivery.id)
        finally:
            with self._lock:
                self._busy -= 1

    def _send(self, delivery: Delivery) -> None:
        at = datetime.now(UTC)
        status, error = None, None
        try:
            secrets = self.secrets_for(delivery.signer)
            if not secrets:
                raise UrlRefused("no signing secret (WEBHOOK_SECRET) is configured")
            headers = signed_headers(msg_id=delivery.id, body=delivery.body, secrets=secrets,
                                     at=at)  # fmt: skip
            status = post(delivery.url, body=delivery.body.encode(), headers=headers,
                          allow=self.policy.allow)  # fmt: skip
        except UrlRefused as refused:
            error = refused.rule
        except Exception as exc:  # no answer: refused, reset, timed out, bad TLS
            error = f"{type(exc).__name__}: {exc}"[:200]
        delivery.tries.append({"at": iso_ms(at), "status": status, "error": error})
        if status is not None and 200 <= status < 300:
            self.outbox.settle(delivery, "delivered")
            metrics.WEBHOOK_DELIVERIES.labels(outcome="delivered").inc()
            return
        log.info("webhooks: %s to %s: try %d got %s", delivery.event, delivery.job_id,
                 len(delivery.tries), status or error)  # fmt: skip
        wait = next_wait(len(delivery.tries))
        if time.time() + wait - delivery.created > self.policy.retry_seconds:
            self.outbox.settle(delivery, "given up")
            metrics.WEBHOOK_DELIVERIES.labels(outcome="given_up").inc()
            log.warning("webhooks: gave up %s of job %s after %d tries", delivery.event,
                        delivery.job_id, len(delivery.tries))  # fmt: skip
            return
        delivery.due = time.time() + wait
        self.outbox.retry(delivery)
        metrics.WEBHOOK_RETRIES.inc()


def _json(value: dict[str, Any]) -> str:
    return json.dumps(value, separators=(",", ":"))
