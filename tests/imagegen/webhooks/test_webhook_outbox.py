"""The webhook outboxes, one contract for both (on disk in process, in a real Redis for
distributed mode): each due delivery is handed to one claim only, however many processes
claim; a claim whose process stopped is due again after the lease; a retried delivery keeps
its body and tries; and the senders give a delivery up, counted, once WEBHOOK_RETRY_SECONDS
has passed, and never run more than WEBHOOK_SENDERS tries at once; a failed job is told as
job.failed. One try never follows a redirect, never reaches an address the rules refuse, and
reads at most a small cap of the answer."""

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from imagegen import metrics
from imagegen.api.webhook_events import event_data
from imagegen.distributed.webhook_outbox import RedisOutbox
from imagegen.generation.job_board import JobProgress, JobState, JobView
from imagegen.generation.requests import GenerationRequest
from imagegen.webhooks.addresses import Allowance, UrlRefused
from imagegen.webhooks.delivery import Dispatcher, Policy
from imagegen.webhooks.outbox import CLAIM_LEASE, Delivery, DiskOutbox, Outbox, Watch
from imagegen.webhooks.sending import post
from tests.support.processes import free_port

KINDS = ("disk", "redis")


@pytest.fixture(params=KINDS)
def outboxes(request, tmp_path: Path) -> Callable[[], Outbox]:
    """Makes outboxes over one store, as several processes would hold."""
    if request.param == "disk":
        return lambda: DiskOutbox(tmp_path)
    server = request.getfixturevalue("redis_server")
    server.client().flushall()
    return lambda: RedisOutbox(server.client())


def watched(outbox: Outbox, job_id: str, due: float) -> Delivery:
    outbox.watch(Watch(job_id, "http://x.example/", "http://o", "service"))
    return Delivery(id=f"msg_{job_id}", job_id=job_id, url="http://x.example/", signer="service",
                    event="job.succeeded", body="{}", created=due, due=due)  # fmt: skip


def test_each_due_delivery_is_made_once_and_handed_to_one_claim(outboxes) -> None:
    first, second = outboxes(), outboxes()
    now = time.time()
    for job_id in ("a", "b", "c"):
        made = watched(first, job_id, now)
        assert first.record(job_id)["state"] == "waiting"
        assert first.enqueue(made)
        assert not second.enqueue(made)  # the watch is gone: made once
    assert first.watches() == []
    first.enqueue(watched(first, "d", now + 60))
    got = [d.id for d in first.claim(now, 2)] + [d.id for d in second.claim(now, 10)]
    assert sorted(got) == ["msg_a", "msg_b", "msg_c"]  # each once, the future one not yet
    assert first.claim(now, 10) == [] and second.pending() == (4, now)
    assert first.record("a")["state"] == "pending"


def test_claims_at_once_from_many_threads_hand_out_each_delivery_once(outboxes) -> None:
    now = time.time()
    setup = outboxes()
    for n in range(40):
        setup.enqueue(watched(setup, f"j{n}", now))
    found: list[str] = []

    def claim() -> None:
        mine = outboxes()
        while batch := mine.claim(now, 3):
            found.extend(d.id for d in batch)

    threads = [threading.Thread(target=claim) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(found) == sorted(f"msg_j{n}" for n in range(40))


def test_a_claim_whose_process_stopped_is_due_again_after_the_lease(outboxes) -> None:
    outbox = outboxes()
    now = time.time()
    outbox.enqueue(watched(outbox, "a", now))
    [claimed] = outbox.claim(now, 1)  # and its process was killed mid-try
    assert outboxes().claim(now + CLAIM_LEASE - 1, 1) == []
    [again] = outboxes().claim(now + CLAIM_LEASE + 1, 1)
    assert again.id == claimed.id


def test_a_retried_delivery_keeps_its_body_and_tries_and_waits_until_due(
    outboxes, tmp_path: Path
) -> None:
    outbox = outboxes()
    now = time.time()
    outbox.enqueue(watched(outbox, "a", now))
    [claimed] = outbox.claim(now, 1)
    claimed.tries.append({"at": "t", "status": 500, "error": None})
    claimed.due = now + 5
    outbox.retry(claimed)
    assert outbox.claim(now + 4, 1) == []
    [again] = outbox.claim(now + 6, 1)
    assert again.tries == claimed.tries and again.body == claimed.body
    outbox.settle(again, "delivered")
    assert outbox.pending() == (0, None)
    assert outbox.record("a") == {"url": "http://x.example/", "event": "job.succeeded",
                                  "state": "delivered", "tries": claimed.tries}  # fmt: skip
    if isinstance(outbox, DiskOutbox):
        assert not any(os.scandir(tmp_path / "claimed"))


class _Ended:
    """A job board that knows one job, ended (the senders read only `lookup`)."""

    def __init__(self, view: JobView | None) -> None:
        self.view = view

    def lookup(self, job_id: str) -> JobView | None:
        return self.view


def counted(outcome: str) -> float:
    return metrics.WEBHOOK_DELIVERIES.labels(outcome=outcome)._value.get()


def test_a_delivery_with_no_2xx_past_webhook_retry_seconds_is_given_up_and_counted(
    tmp_path: Path,
) -> None:
    outbox = DiskOutbox(tmp_path)
    dead = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens
    outbox.watch(Watch("a", dead, "http://o", "service"))
    outbox.enqueue(Delivery(id="msg_a", job_id="a", url=dead, signer="service",
                            event="job.failed", body="{}", created=time.time(),
                            due=time.time()))  # fmt: skip
    policy = Policy(allow=Allowance.parse(["127.0.0.1"]), retry_seconds=2, senders=2)
    dispatcher = Dispatcher(outbox, _Ended(None), policy, describe=lambda v, w: {},  # type: ignore[arg-type]
                            secrets_for=lambda signer: ["whsec_" + "a" * 44])  # fmt: skip
    before = counted("given_up")
    deadline = time.monotonic() + 30
    while (outbox.record("a") or {}).get("state") != "given up":
        assert time.monotonic() < deadline, outbox.record("a")
        dispatcher.tick()
        time.sleep(0.1)
    tries = outbox.record("a")["tries"]
    assert 2 <= len(tries) <= 4 and all(t["status"] is None for t in tries)
    assert counted("given_up") == before + 1
    assert outbox.pending() == (0, None)


@pytest.fixture
def redirecting() -> Iterator[tuple[str, list[str]]]:
    """A server that answers every POST with a redirect to its own /elsewhere."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(self.path)
            self.send_response(307)
            self.send_header("Location", "/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/hook", seen
    server.shutdown()


def test_a_try_does_not_follow_a_redirect(redirecting) -> None:
    url, seen = redirecting
    status = post(url, body=b"{}", headers={}, allow=Allowance.parse(["127.0.0.1"]))
    assert status == 307 and seen == ["/hook"]


def test_a_try_to_an_address_the_rules_refuse_connects_to_nothing(redirecting) -> None:
    url, seen = redirecting
    with pytest.raises(UrlRefused):
        post(url, body=b"{}", headers={}, allow=Allowance.parse([]))
    assert seen == []


def test_no_more_than_webhook_senders_tries_run_at_once(tmp_path: Path) -> None:
    """A slow receiver holds at most WEBHOOK_SENDERS threads; the rest wait in the outbox."""
    lock, now_open, most = threading.Lock(), [0], [0]

    class Slow(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            with lock:
                now_open[0] += 1
                most[0] = max(most[0], now_open[0])
            time.sleep(0.5)
            with lock:
                now_open[0] -= 1
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/hook"
    outbox = DiskOutbox(tmp_path)
    for n in range(6):
        outbox.watch(Watch(f"j{n}", url, "http://o", "service"))
        outbox.enqueue(Delivery(id=f"msg_j{n}", job_id=f"j{n}", url=url, signer="service",
                                event="job.succeeded", body="{}", created=time.time(),
                                due=time.time()))  # fmt: skip
    policy = Policy(allow=Allowance.parse(["127.0.0.1"]), retry_seconds=60, senders=2)
    dispatcher = Dispatcher(outbox, _Ended(None), policy, describe=lambda v, w: {},  # type: ignore[arg-type]
                            secrets_for=lambda signer: ["whsec_" + "a" * 44])  # fmt: skip
    deadline = time.monotonic() + 30
    while outbox.pending()[0]:
        assert time.monotonic() < deadline, outbox.pending()
        dispatcher.tick()
        time.sleep(0.05)
    server.shutdown()
    assert most[0] == 2
    assert all(outbox.record(f"j{n}")["state"] == "delivered" for n in range(6))


def test_a_failed_job_is_told_as_job_failed_with_its_error(tmp_path: Path) -> None:
    """The event's type follows the job's final state (succeeded and cancelled: end to end in
    test_webhooks.py); its `data` is the job's answer, error included."""
    failed = JobView(
        id="f00d", state=JobState.FAILED, position=None, phase="failed",
        progress=JobProgress(step=1, steps=4, fraction=0.25, elapsed_seconds=1.0,
                             eta_seconds=None),
        parameters=GenerationRequest(prompt="p"), created_at=datetime.now(UTC),
        started_at=None, finished_at=datetime.now(UTC), error="the pipeline raised", image=None,
    )  # fmt: skip
    outbox = DiskOutbox(tmp_path)
    outbox.watch(Watch("f00d", "http://x.example/", "http://o", "service"))
    policy = Policy(allow=Allowance.parse([]), retry_seconds=60, senders=1)
    dispatcher = Dispatcher(outbox, _Ended(failed), policy, describe=event_data,  # type: ignore[arg-type]
                            secrets_for=lambda signer: [])  # fmt: skip
    dispatcher._notice(outbox.watches()[0])
    [made] = outbox.claim(time.time(), 1)
    body = json.loads(made.body)
    assert (body["type"], made.event) == ("job.failed", "job.failed")
    assert body["data"]["state"] == "failed" and body["data"]["error"] == "the pipeline raised"
    assert "image_link" not in body["data"] and outbox.watches() == []


def test_old_records_are_forgotten_and_recent_ones_kept(tmp_path: Path) -> None:
    outbox = DiskOutbox(tmp_path)
    for job_id in ("old", "new"):
        outbox.watch(Watch(job_id, "http://x.example/", "http://o", "service"))
    week_ago = time.time() - 7 * 86400
    os.utime(tmp_path / "records" / "old.json", (week_ago, week_ago))
    outbox.forget_records(older_than=2 * 86400)
    assert outbox.record("old") is None and outbox.record("new") is not None


def test_a_try_reads_no_more_than_a_small_cap_of_the_answer() -> None:
    """A receiver that sends an endless answer does not hold a sender: the status is taken
    and at most RESPONSE_CAP bytes read."""
    release = threading.Event()

    class Endless(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(10**9))
            self.end_headers()
            self.wfile.write(b"x" * 65536)
            self.wfile.flush()
            release.wait(30)  # the rest never comes

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Endless)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    started = time.monotonic()
    try:
        status = post(f"http://127.0.0.1:{server.server_port}/hook", body=b"{}", headers={},
                      allow=Allowance.parse(["127.0.0.1"]))  # fmt: skip
    finally:
        release.set()
        server.shutdown()
    assert status == 200 and time.monotonic() - started < 5
