"""The shared job store against a real redis-server, in process: revisions and waiting for a
change (what the progress stream reads), woken by the store's announcements, the heartbeat and
a lost worker's job (run once more, then failed, and what it answers; a stale run's writes
refused; time the store was away not counted), and answers byte for byte the same as the
in-process queue's."""

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import redis
from PIL import Image
from prometheus_client import REGISTRY

from core.request_context import request_scope
from imagegen.api.schemas import JobOut
from imagegen.distributed.board import RedisJobBoard
from imagegen.distributed.changes import ChangeFeed
from imagegen.distributed.connection import store_client
from imagegen.distributed.store import CHANGED, CLOCK, RUNNING, WORKERS, JobStore, worker_key
from imagegen.distributed.timings import RedisTimings
from imagegen.distributed.worker import RESCUE_BEATS, WorkerRuntime, default_worker_name
from imagegen.errors import KeyQueueLimit
from imagegen.generation.estimates import Measurements, Timing
from imagegen.generation.execution import Outcome
from imagegen.generation.images import GenerationParameters, ImageStore, png_bytes
from imagegen.generation.job_board import JobState
from imagegen.generation.presets import generation_rules
from imagegen.generation.requests import GenerationRequest
from tests.imagegen.api.test_answer_shapes import QUEUED, RECORD, SUCCEEDED, answer
from tests.support.distributed import RedisServer
from tests.support.loaders import new_loader, wait_for

REQUEST = GenerationRequest(prompt="q", negative_prompt="n", steps=4, guidance=0.0, seed=7)


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture
def store(redis_server: RedisServer) -> JobStore:
    client = redis_server.client()
    client.flushdb()
    return JobStore(client, heartbeat_ttl=1.0)


@pytest.fixture
def board(store: JobStore, tmp_path: Path) -> RedisJobBoard:
    timings = RedisTimings(store.redis, "test-model")
    return RedisJobBoard(store, models=None, queue_max=8, keep=200, rules=None, timings=timings)


def add(store: JobStore, job_id: str, *, queue_max: int = 8, owner: str | None = None) -> bool:
    return store.add(job_id, REQUEST, owner=owner, batch=None, queue_max=queue_max, keep=200)


def test_every_write_a_client_can_see_raises_the_revision(store):
    add(store, "a")
    add(store, "b")
    seen = [store.view("b").revision]
    store.claim("w1")  # "a" runs: "b" moves up the queue
    seen.append(store.view("b").revision)
    assert store.view("b").position == 1
    store.claim("w2")
    seen.append(store.view("b").revision)
    for step in (1, 2):
        store.update("b", 1, step=step, steps=4)
        seen.append(store.view("b").revision)
    store.cancel("b")  # running: marked, stops at its next step end
    seen.append(store.view("b").revision)
    store.finish("b", 1, state="cancelled", phase="cancelled while running")
    seen.append(store.view("b").revision)
    assert seen == sorted(set(seen)), seen  # strictly increasing
    assert store.view("b").state is JobState.CANCELLED


def test_wait_change_answers_at_the_next_write_or_with_the_current_view_at_the_timeout(board):
    store = board.jobs
    add(store, "a")
    store.claim("w1")
    now = store.view("a").revision

    started = time.monotonic()
    same = board.wait_change("a", now, timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 1.0
    assert same.revision == now and same.state is JobState.RUNNING

    threading.Timer(0.2, lambda: store.update("a", 1, step=1, steps=4)).start()
    started = time.monotonic()
    changed = board.wait_change("a", now, timeout=10)
    assert time.monotonic() - started < 1.0  # as soon as it changed, not at the timeout
    assert changed.revision > now and changed.progress.step == 1

    assert board.wait_change("missing", 0, timeout=0.1) is None


def reachable_for(store: JobStore, seconds: float) -> None:
    """Time passes with the store reachable and seen so: a tick every tenth of the TTL, as
    live workers' beats make them, judging nothing (the beat of a job that does not exist
    ticks the clock and writes nothing else)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert store.beat("no such job", 1) is True
        time.sleep(store.heartbeat_ttl / 10)


# The TTL of the tests that only wait for a whole one to pass without a beat; those that also
# hold a job not yet lost short of it keep the `store` fixture's 1 s, for its wider margins.
QUICK_TTL = 0.5


def quickly_judged(store: JobStore) -> JobStore:
    """The same store with QUICK_TTL."""
    return JobStore(store.redis, heartbeat_ttl=QUICK_TTL)


def a_whole_ttl(store: JobStore) -> None:
    """A whole TTL and a fifth without a beat, the store reachable: more, until the store's
    reachable time is a whole TTL past every running job's last beat (a tick delayed past the
    store's largest gap on a busy machine counts nothing)."""
    reachable_for(store, 1.2 * store.heartbeat_ttl)
    deadline = time.monotonic() + 10
    while True:
        reach = int(store.redis.hget(CLOCK, "reach") or 0)
        beats = store.redis.zrange(RUNNING, 0, -1, withscores=True)
        if all(reach - score > store.ttl_ms for _, score in beats):
            return
        assert time.monotonic() < deadline, (reach, beats)
        reachable_for(store, 0.1 * store.heartbeat_ttl)


def finished_count(outcome: str) -> float:
    """imagegen_jobs_finished_total{outcome} of this process (imagegen.metrics)."""
    value = REGISTRY.get_sample_value("imagegen_jobs_finished_total", {"outcome": outcome})
    return value or 0.0


def unfinished(store: JobStore) -> list[str]:
    return [i.decode() for i in store.redis.lrange("imagegen:unfinished", 0, -1)]


def test_a_job_whose_heartbeat_stopped_runs_again_once_even_with_judges_racing(store):
    store = quickly_judged(store)
    woken: list[str] = []
    store.wake = woken.append
    add(store, "a")
    add(store, "b")
    store.claim("w1")
    assert store.view("a").state is JobState.RUNNING  # its heartbeat is fresh
    a_whole_ttl(store)  # a whole TTL without a beat, the store reachable
    results: list[list] = []
    threads = [threading.Thread(target=lambda: results.append(store.sweep()))
               for _ in range(8)]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results, key=len) == [[]] * 7 + [[("a", "requeued")]]  # one of them acts
    assert woken == ["a"]  # a worker is told: its first message was taken long ago
    view = store.view("a")
    assert view.state is JobState.QUEUED and view.position == 1  # ahead of "b", as it was
    assert view.phase == "waiting for its turn: its worker w1 was lost, it runs again"
    assert view.started_at is None and view.progress.step == 0
    assert unfinished(store) == ["a", "b"]  # still work for KEDA to count
    again = store.claim("w2")
    assert (again.job_id, again.attempt) == ("a", 2)
    assert [(a["worker"], "lost_at" in a) for a in store.attempts("a")] == [
        ("w1", True),
        ("w2", False),
    ]


def test_a_lost_run_that_was_only_slow_stores_nothing(store):
    """Its worker froze past the TTL and came back: the job runs again elsewhere, and each
    write of the stale run (progress, heartbeat, outcome) is refused in the script itself."""
    store = quickly_judged(store)
    add(store, "a")
    store.claim("w1")
    store.update("a", 1, step=3, steps=4)
    a_whole_ttl(store)
    assert store.sweep() == [("a", "requeued")]
    assert store.claim("w2").attempt == 2
    store.update("a", 2, step=1, steps=4)
    assert store.update("a", 1, step=4, steps=4) == -1  # stale: stop
    assert store.beat("a", 1) is True  # stale: stop
    assert not store.finish("a", 1, state="succeeded", phase="done", image="stale")
    view = store.view("a")
    assert view.state is JobState.RUNNING and view.progress.step == 1 and view.image is None
    assert store.beat("a", 2) is False  # the current run goes on
    assert store.finish("a", 2, state="succeeded", phase="done")
    assert store.view("a").state is JobState.SUCCEEDED


def test_a_stale_runs_image_is_removed_when_its_outcome_is_refused(store, hub, tmp_path: Path):
    """What a worker does with a refused outcome: the image it saved goes, so the job's
    image is stored once (by the run that is current)."""
    store = quickly_judged(store)
    images = ImageStore(tmp_path / "images")
    loader = new_loader(hub, tmp_path / "share", tmp_path / "cache")  # never loaded here
    runtime = WorkerRuntime(
        store, loader, images, name="w1", load_timeout=1, timings=RedisTimings(store.redis, "m")
    )
    parameters = GenerationParameters(
        prompt="q", negative_prompt=None, steps=4, guidance=0.0, width=8, height=8, seed=7,
        scheduler="Euler", model_id="m", revision=None,
    )  # fmt: skip
    png = png_bytes(Image.new("RGB", (8, 8)), parameters)
    add(store, "a")
    stale = store.claim("w1")
    a_whole_ttl(store)
    store.sweep()
    current = store.claim("w2")
    late = images.save(png, parameters, device="cpu", timings={})
    counted = finished_count("succeeded")
    assert not runtime.finish(stale, Outcome(JobState.SUCCEEDED, "done", image=late))
    assert finished_count("succeeded") == counted  # not the job's outcome: not counted
    assert images.get(late.id) is None and not images.png_path(late.id).exists()
    kept = images.save(png, parameters, device="cpu", timings={})
    assert runtime.finish(current, Outcome(JobState.SUCCEEDED, "done", image=kept))
    assert finished_count("succeeded") == counted + 1
    assert images.get(kept.id) == kept and store.view("a").image == kept


def test_a_job_that_loses_a_second_worker_fails_naming_both(store):
    store = quickly_judged(store)
    add(store, "a")
    store.claim("w1")
    a_whole_ttl(store)
    store.sweep()
    store.claim("w2")
    a_whole_ttl(store)
    failed = finished_count("failed")
    assert store.sweep() == [("a", "failed")]
    assert finished_count("failed") == failed + 1  # counted where it was judged
    view = store.view("a")
    assert view.state is JobState.FAILED and view.finished_at is not None
    assert view.failure.status == 503 and view.failure.retry_after > 0
    assert view.error in view.failure.message  # which job, which worker rule
    assert view.error == (
        "worker lost: job a lost 2 workers, w1 and w2, each of which stopped beating for 0.5 s "
        "(JOB_HEARTBEAT_TTL) while the job store was reachable; it is not run again"
    )
    assert unfinished(store) == []
    assert [a["worker"] for a in store.attempts("a") if a.get("lost_at")] == ["w1", "w2"]
    assert store.claim("w3") is None  # not queued a third time
    assert not store.finish("a", 2, state="succeeded", phase="done")


def test_a_job_lost_twice_by_one_worker_says_so_once(store):
    """A worker frozen past the TTL, back, and lost again: its name is not told twice as if
    two workers (their default names differ for every process start: default_worker_name)."""
    store = quickly_judged(store)
    add(store, "a")
    for _ in range(2):
        store.claim("w1")
        a_whole_ttl(store)
        store.sweep()
    assert store.view("a").error.startswith(
        "worker lost: job a lost its worker w1 twice, which each time stopped beating for 0.5 s"
    )
    names = {default_worker_name() for _ in range(20)}
    assert len(names) == 20  # the same host and pid: a container started again
    assert all(name.startswith(f"{socket.gethostname()}-{os.getpid()}-") for name in names)


def test_a_worker_stopping_lets_the_job_it_took_up_itself_finish(store, hub, tmp_path):
    """A scale-in's SIGTERM while an idle worker runs a job without a message: stop() waits
    for it (its heartbeat going on), as Celery's warm shutdown waits for its own task, and
    takes up nothing after."""
    loader = new_loader(hub, tmp_path / "share", tmp_path / "cache")
    assert loader.pull()
    assert wait_for(loader, {"ready", "failed"}) == "ready", loader.status()
    runtime = WorkerRuntime(
        store, loader, ImageStore(tmp_path / "images"), name="leaving", load_timeout=60,
        timings=RedisTimings(store.redis, "m"),
    )  # fmt: skip
    long = GenerationRequest(prompt="q", steps=60, guidance=0.0, seed=1, size=(64, 64))
    assert store.add("a", long, owner=None, batch=None, queue_max=8, keep=200)
    for _ in range(RESCUE_BEATS + 1):
        runtime.beat()
    deadline = time.monotonic() + 30
    while store.view("a").progress.step < 1:
        assert time.monotonic() < deadline, store.view("a")
        time.sleep(0.02)
    stopping = threading.Thread(target=runtime.stop)
    stopping.start()
    stopping.join(0.3)
    assert stopping.is_alive() and store.view("a").state is JobState.RUNNING
    stopping.join(120)
    assert not stopping.is_alive()
    done = store.view("a")
    assert done.state is JobState.SUCCEEDED and len(store.attempts("a")) == 1
    add(store, "b")  # after stop(): nothing is taken up
    for _ in range(RESCUE_BEATS + 2):
        runtime.beat()
    time.sleep(0.2)
    assert store.attempts("b") == []


def test_an_idle_worker_runs_a_job_left_waiting_without_its_message(store, hub, tmp_path, caplog):
    """A job whose message was lost (queued again after its worker was lost, the message not
    sent), or whose message no consumer takes (Celery's consumer stopped for good after
    Redis went away mid-ack): an idle worker that finds it at the head of the queue for
    RESCUE_BEATS beats in a row runs it itself, and a busy worker leaves it."""
    loader = new_loader(hub, tmp_path / "share", tmp_path / "cache")
    runtime = WorkerRuntime(
        store, loader, ImageStore(tmp_path / "images"), name="idle", load_timeout=1,
        timings=RedisTimings(store.redis, "m"),
    )  # fmt: skip
    add(store, "a")  # no message
    for _ in range(RESCUE_BEATS):
        runtime.beat()
    assert store.view("a").state is JobState.QUEUED  # its message may be on its way
    runtime.beat()
    deadline = time.monotonic() + 30
    while not store.attempts("a"):
        assert time.monotonic() < deadline, "no worker took the job"
        time.sleep(0.05)
    assert store.attempts("a")[0]["worker"] == "idle"
    assert "job a: waited 3 beats with worker idle idle and no message taken" in caplog.text
    while runtime._one_job.locked():  # the model is not on this share: it fails, saying so
        time.sleep(0.05)
    runtime.job_id = "another"  # busy from here: a waiting job is not its to take
    add(store, "b")
    for _ in range(RESCUE_BEATS + 2):
        runtime.beat()
    time.sleep(0.2)
    assert store.view("b").state is JobState.QUEUED and store.attempts("b") == []


def test_a_lost_job_asked_to_cancel_ends_cancelled_not_run_again(store):
    store = quickly_judged(store)
    add(store, "a")
    store.claim("w1")
    store.cancel("a")
    a_whole_ttl(store)
    assert store.sweep() == [("a", "cancelled")]
    assert store.view("a").state is JobState.CANCELLED and unfinished(store) == []


def test_a_beating_job_is_not_lost(store):
    store = quickly_judged(store)
    add(store, "a")
    store.claim("w1")
    for _ in range(6):
        time.sleep(0.4 * QUICK_TTL)
        assert store.beat("a", 1) is False
        assert store.sweep() == [] and store.view("a").state is JobState.RUNNING


def test_the_bound_counts_waiting_jobs_beyond_idle_workers(store):
    assert add(store, "a", queue_max=1)
    assert not add(store, "b", queue_max=1)  # no worker: "a" waits, the queue is full
    store.redis.set("imagegen:worker:w1", "{}")
    store.redis.sadd("imagegen:idle", "w1")
    assert add(store, "b", queue_max=1)  # an idle worker is about to take one
    store.redis.delete("imagegen:worker:w1")  # its heartbeat is gone: not idle any more
    assert not add(store, "c", queue_max=1)


def test_a_keys_limit_is_counted_in_the_step_that_queues_its_job(store):
    """--max-queued in Redis: 8 submits of one key at once, limit 2, exactly 2 queued; other
    keys are not counted; a job that finishes gives its place back."""
    ready = threading.Barrier(8)

    def submit(index: int) -> bool:
        ready.wait()
        try:
            return store.add(
                f"k{index}", REQUEST, owner=None, batch=None, key="erin", key_limit=2,
                queue_max=100, keep=200,
            )  # fmt: skip
        except KeyQueueLimit:
            return False

    with ThreadPoolExecutor(8) as pool:
        queued = [f"k{i}" for i, added in enumerate(pool.map(submit, range(8))) if added]
    assert len(queued) == 2
    other = store.add("other", REQUEST, owner=None, batch=None, key="bob", key_limit=2,
                      queue_max=100, keep=200)  # fmt: skip
    assert other
    claimed = store.claim("w1")  # the first of the fair order: one of erin's
    assert claimed is not None and claimed.job_id in queued
    store.finish(claimed.job_id, claimed.attempt, state="succeeded", phase="done")
    assert store.add("again", REQUEST, owner=None, batch=None, key="erin", key_limit=2,
                     queue_max=100, keep=200)  # fmt: skip
    with pytest.raises(KeyQueueLimit):
        store.add("more", REQUEST, owner=None, batch=None, key="erin", key_limit=2,
                  queue_max=100, keep=200)  # fmt: skip


def test_answers_are_byte_for_byte_those_of_the_in_process_queue(store):
    """The in-process views of tests/imagegen/api/test_answer_shapes.py, stored and read back."""
    for job_id in ("x", "y"):
        add(store, job_id)  # two ahead of QUEUED: its position is 3
    store.add(QUEUED.id, QUEUED.parameters, owner=None, batch=None, queue_max=8, keep=200)
    store.redis.hset(f"imagegen:job:{QUEUED.id}", "created_at", QUEUED.created_at.isoformat())
    assert answer(JobOut, store.view(QUEUED.id)) == answer(JobOut, QUEUED)

    with request_scope(rid=SUCCEEDED.request_id or "", path="/generate"):  # its X-Request-ID
        store.add(SUCCEEDED.id, SUCCEEDED.parameters, owner=None, batch=None, queue_max=8,
                  keep=200)  # fmt: skip
    store.redis.zrem("imagegen:queued", SUCCEEDED.id)
    store.redis.hset(
        f"imagegen:job:{SUCCEEDED.id}",
        mapping={
            "state": "succeeded", "phase": "done", "step": 20, "steps": 20,
            "created_at": SUCCEEDED.created_at.isoformat(),
            "started_at": SUCCEEDED.started_at.isoformat(),
            "finished_at": SUCCEEDED.finished_at.isoformat(),
            "image": RECORD.model_dump_json(),
        },
    )  # fmt: skip
    assert answer(JobOut, store.view(SUCCEEDED.id)) == answer(JobOut, SUCCEEDED)


def test_a_reader_judges_as_the_workers_do(store):
    """A reader of a running job sweeps first (with every worker gone, a waiting request
    still sees the job handled), and a beat just before the judgement keeps it running."""
    add(store, "a")
    store.claim("w1")
    reachable_for(store, 0.8)
    store.beat("a", 1)  # late, but within the TTL
    reachable_for(store, 0.8)
    assert store.view("a").state is JobState.RUNNING
    reachable_for(store, 0.4)
    assert store.view("a").state is JobState.QUEUED  # the read itself handled it


def test_time_the_store_was_away_is_no_evidence_of_a_lost_worker(tmp_path: Path):
    """A restart of a persistent redis-server longer than the TTL: the running job's worker
    gets a whole TTL of the store reachable to beat again before its job is judged."""
    with RedisServer(tmp_path / "redis", persistent=True) as server:
        store = JobStore(server.client(), heartbeat_ttl=1.0)
        add(store, "a")
        store.claim("w1")
        reachable_for(store, 0.5)
        server.stop()
        time.sleep(2.0)  # twice the TTL without a beat, and without a store
        server.start()
        assert store.sweep() == []
        reachable_for(store, 0.7)  # less than a TTL since the store is back
        assert store.view("a").state is JobState.RUNNING
        assert store.beat("a", 1) is False  # the worker re-asserts its job
        reachable_for(store, 0.7)
        assert store.view("a").state is JobState.RUNNING
        reachable_for(store, 0.5)  # its worker really is gone now: a whole TTL since its beat
        assert store.sweep() == [("a", "requeued")]


def test_the_list_keda_scales_on_holds_each_queued_or_running_job_until_it_ends(store):
    """A job lost by its worker stays on the list while it is queued again and leaves it when
    it fails: test_a_job_whose_heartbeat_stopped_runs_again_once_even_with_judges_racing and
    test_a_job_that_loses_a_second_worker_fails_naming_both."""
    for job_id in ("a", "b", "c", "d"):
        add(store, job_id)
    store.claim("w1")  # "a" runs: still counted, its worker must not be scaled away
    assert unfinished(store) == ["a", "b", "c", "d"]
    store.finish("a", 1, state="succeeded", phase="done")
    store.cancel("b")
    store.claim("w2")  # "c"
    assert unfinished(store) == ["c", "d"]


def test_the_workers_timings_and_the_shared_queue_make_every_replicas_estimate(store):
    """What a web replica estimates with: the timings workers recorded in Redis (the last
    three at a size, each stage at its fastest) and the shared queue, the running job first."""
    timings = RedisTimings(store.redis, "test-model")
    assert timings.measurements() == Measurements(timings=(), native=None)
    at_64 = Timing(width=64, height=64, encode_seconds=1.0, step_seconds=2.0, decode_seconds=3.0)
    timings.record(at_64, native=True)
    timings.record(Timing(64, 64, 1.0, 5.0, 3.0), native=False)  # a slow one, kept beside it
    assert timings.measurements() == Measurements(timings=(at_64,), native=(64, 64))
    assert RedisTimings(store.redis, "another-model").measurements().timings == ()

    rules = generation_rules(
        preset=None, default_steps=4, default_guidance=0.0, default_scheduler=None,
        steps_cap=None, guidance_cap=None, max_steps=100, max_guidance=30.0,
    )  # fmt: skip
    board = RedisJobBoard(store, models=None, queue_max=8, keep=200, rules=rules, timings=timings)
    assert add(store, "running") and add(store, "waiting")  # REQUEST: 4 steps, native size
    assert store.claim("w1").job_id == "running"
    store.update("running", 1, step=3, steps=4)  # one step and the decode left
    found = board.estimate(GenerationRequest(prompt="p", size=(64, 64)))
    whole = 1 + 4 * 2 + 3
    assert found.queue_seconds == (2 + 3) + whole  # no live worker counts as one
    assert found.seconds == found.queue_seconds + whole
    for name in ("w1", "w2"):  # two live workers: the waiting job takes the free one
        store.redis.sadd(WORKERS, name)
        store.redis.set(worker_key(name), json.dumps({"name": name}), px=60_000)
    assert board.estimate(GenerationRequest(prompt="p", size=(64, 64))).queue_seconds == 2 + 3


# -- waiting on the store's announcements (imagegen.distributed.changes) -----------------------


@pytest.fixture
def notified(store: JobStore, redis_server: RedisServer) -> Iterator[RedisJobBoard]:
    """The board as the backend builds it: waits wake on the store's announcements. Its
    running jobs are not lost while a test waits (JOB_HEARTBEAT_TTL's default)."""
    timings = RedisTimings(store.redis, "test-model")
    changes = ChangeFeed(redis_server.client())
    yield RedisJobBoard(
        JobStore(store.redis, heartbeat_ttl=30), models=None, queue_max=8, keep=200,
        rules=None, timings=timings, changes=changes,
    )  # fmt: skip
    changes.close()


def subscribed(store: JobStore) -> None:
    """Once the listener's subscription to the store's announcements is in place."""
    deadline = time.monotonic() + 10
    while store.redis.pubsub_numsub(CHANGED) != [(CHANGED.encode(), 1)]:
        assert time.monotonic() < deadline, "the listener never subscribed"
        time.sleep(0.02)


def job_reads(store: JobStore) -> int:
    """The job reads Redis has served so far (one HGETALL each)."""
    return int(store.redis.info("commandstats").get("cmdstat_hgetall", {}).get("calls", 0))


def timed(call) -> tuple[object, float]:
    started = time.monotonic()
    return call(), time.monotonic() - started


def test_a_waiting_request_wakes_on_the_announcement_and_reads_once_a_second_meanwhile(notified):
    store = notified.jobs
    add(store, "a")
    store.claim("w1")
    notified.wait_change("a", 0, timeout=0.1)  # starts the listener
    subscribed(store)
    reads = job_reads(store)
    same, waited = timed(lambda: notified.wait("a", timeout=2.5))
    assert same.state is JobState.RUNNING and waited >= 2.5
    assert job_reads(store) - reads <= 4  # the fallback's read a second, not 50 of them

    threading.Timer(0.3, lambda: store.finish("a", 1, state="succeeded", phase="done")).start()
    done, waited = timed(lambda: notified.wait("a", timeout=10))
    assert done.state is JobState.SUCCEEDED
    assert waited < 0.6  # at the announcement, not at the next fallback read (1 s)

    add(store, "b")
    add(store, "c")
    now = store.view("c").revision
    threading.Timer(0.3, lambda: store.claim("w1")).start()  # "b" runs: "c" moves up
    moved, waited = timed(lambda: notified.wait_change("c", now, timeout=10))
    assert moved.position == 1 and waited < 0.6  # a queue move wakes every queued job's


def test_a_stream_on_a_running_job_reads_it_about_once_a_second(notified):
    # Every read of a running job sweeps for lost ones first. A sweep that finds nothing is
    # no news: announced, it woke the stream (which follows the queue's moves) to read, sweep
    # and announce again, as fast as Redis answered.
    store = notified.jobs
    add(store, "a")
    store.claim("w1")
    now = store.view("a").revision
    notified.wait_change("a", now, timeout=0.1)  # starts the listener
    subscribed(store)
    reads = job_reads(store)
    same, waited = timed(lambda: notified.wait_change("a", now, timeout=2.5))
    assert same.revision == now and waited >= 2.5
    assert job_reads(store) - reads <= 4  # the fallback's read a second


def test_a_request_waiting_on_a_queued_job_learns_of_its_cancel_at_once(notified):
    store = notified.jobs
    add(store, "a")
    add(store, "b")
    store.claim("w1")
    notified.wait_change("b", 0, timeout=0.1)  # starts the listener
    subscribed(store)
    threading.Timer(0.3, lambda: store.cancel("b")).start()
    done, waited = timed(lambda: notified.wait("b", timeout=10))
    assert done.state is JobState.CANCELLED
    assert waited < 0.6  # at the announcement of its id, not at the next fallback read


def test_with_job_wait_poll_a_waiting_request_reads_every_50_ms(board):
    store = board.jobs
    add(store, "a")
    store.claim("w1")
    reads = job_reads(store)
    board.wait("a", timeout=0.8)  # within the TTL (1 s here): still running
    assert job_reads(store) - reads >= 12  # a read every POLL_SECONDS


def test_announcements_reach_waiting_requests_again_after_redis_restarts(redis_server):
    feed, publisher = ChangeFeed(redis_server.client()), redis_server.client()

    def announced(changed: threading.Event) -> bool:
        changed.clear()
        with contextlib.suppress(redis.RedisError):
            publisher.publish(CHANGED, "a")
        return changed.wait(0.1)

    try:
        with feed.watch("a") as changed:
            wait_until(lambda: announced(changed))
            redis_server.stop()
            time.sleep(1.5)
            redis_server.start()
            # resubscribed by itself: a message reaches the waiting request again
            wait_until(lambda: announced(changed), timeout=20)
    finally:
        feed.close()


def test_the_listener_goes_on_after_a_failure_of_its_own(redis_server, monkeypatch):
    feed, publisher = ChangeFeed(redis_server.client()), redis_server.client()
    failed: list[str] = []
    wake = feed.wake

    def wake_broken_once(job_id: str) -> None:
        if not failed:
            failed.append(job_id)
            raise RuntimeError("a bug in waking")
        wake(job_id)

    monkeypatch.setattr(feed, "wake", wake_broken_once)

    def announced(changed: threading.Event) -> bool:
        changed.clear()
        publisher.publish(CHANGED, "a")
        return changed.wait(0.1)

    try:
        with feed.watch("a") as changed:
            wait_until(lambda: publisher.pubsub_numsub(CHANGED)[0][1] == 1)
            time.sleep(0.3)  # its subscription's own message (which wakes all) handled
            wait_until(lambda: announced(changed), timeout=20)
        assert failed == ["a"]  # the first announcement broke it; a later one still came
    finally:
        feed.close()


def wait_until(check, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


# -- what a failed job answers ----------------------------------------------------------------


def test_a_job_that_failed_in_its_pipeline_answers_no_retry(store):
    """A job whose worker was lost answers 503 with Retry-After:
    test_a_job_that_loses_a_second_worker_fails_naming_both."""
    add(store, "b")
    store.claim("w1")
    store.finish("b", 1, state="failed", phase="failed", error="RuntimeError: the UNet raised")
    assert store.view("b").failure is None  # the pipeline raised: JobFailed's 500


def test_a_jobs_preview_is_one_hash_written_over_and_removed_with_the_job(store):
    from imagegen.distributed.store import PREVIEW_TTL_MS, preview_key
    from imagegen.generation.previews import Preview

    add(store, "p")
    store.claim("w1")
    before = store.view("p").revision
    for step in (1, 2):
        store.write_preview(
            "p", 1, Preview(step=step, steps=4, width=8, height=8, data=b"x" * step)
        )
    assert store.view("p").preview_step == 2 and store.view("p").revision == before + 2
    latest = store.preview("p")
    assert latest is not None and (latest.step, latest.data) == (2, b"xx")  # the latest only
    assert store.redis.keys(preview_key("p") + "*") == [preview_key("p").encode()]  # one key
    assert 0 < store.redis.pttl(preview_key("p")) <= PREVIEW_TTL_MS  # expires in any case
    store.write_preview("p", 1, Preview(step=3, steps=4, width=8, height=8, data=b"z", partial=0))
    assert store.preview("p", 0).data == b"z" and store.preview("p", 1) is None
    assert store.preview("p").step == 3
    store.finish("p", 1, state="cancelled", phase="cancelled while running")
    assert store.preview("p").step == 3  # a cancelled job keeps its last preview
    # Remembered no more (JOBS_KEEP, here 0 finished jobs kept): its preview goes with it.
    store.add("q", REQUEST, owner=None, batch=None, queue_max=8, keep=0)
    assert store.view("p") is None and store.preview("p") is None
    store.redis.hset(preview_key("q"), "step", 1)
    store.forget("q")  # a job taken back: its preview too
    assert not store.redis.exists(preview_key("q"))


def test_a_job_run_again_after_its_worker_was_lost_starts_its_previews_anew(store):
    """The lost run's preview would otherwise stand for the new run, and a stream would send
    no preview until the new run passed the old one's step."""
    from imagegen.generation.previews import Preview

    store = quickly_judged(store)
    add(store, "r")
    store.claim("w1")
    store.write_preview("r", 1, Preview(step=3, steps=4, width=8, height=8, data=b"old"))
    a_whole_ttl(store)
    assert store.sweep() == [("r", "requeued")]
    assert store.view("r").preview_step == 0 and store.preview("r") is None
    store.claim("w2")
    store.write_preview("r", 2, Preview(step=1, steps=4, width=8, height=8, data=b"new"))
    assert store.view("r").preview_step == 1 and store.preview("r").data == b"new"


@pytest.mark.parametrize(
    ("field", "forged"),
    [
        ("request", {"edit": {"source": "../../../../etc/passwd"}}),
        ("request", {"edit": {"source": "a" * 64, "mask": "/etc/shadow"}}),
        ("key", "../../elsewhere"),
    ],
)
def test_a_forged_job_is_failed_unread_and_the_next_one_runs(store, tmp_path, field, forged):
    """Someone who can write to Redis writes a job whose input digest or key is a path: the
    worker fails it without reading anything, and goes on to the next job."""
    from imagegen.distributed.store import job_key

    add(store, "forged")
    if field == "request":
        request = {**json.loads(REQUEST.model_dump_json()), **forged}
        store.redis.hset(job_key("forged"), "request", json.dumps(request))
    else:
        store.redis.hset(job_key("forged"), "key", forged)
    add(store, "next")
    claimed = store.claim("w1")
    assert claimed is not None and claimed.job_id == "next"
    state, error = store.redis.hmget(job_key("forged"), "state", "error")
    assert (state, error) == (b"failed", b"the job's stored fields are not valid")
    # The image store refuses such a name too, whoever asks.
    with pytest.raises(ValueError, match="not an input's sha256"):
        ImageStore(tmp_path).read_input("../../../../etc/passwd")


def test_submits_deciding_again_are_not_counted_as_redis_errors(redis_server):
    """WATCH's refusals are how concurrent submits take turns, not a fault of Redis: the
    production client (its budget and retries) counts none of them in
    imagegen_redis_errors_total."""
    from imagegen import metrics

    client = store_client(redis_server.url, timeout=5, max_waiting=None)
    client.flushdb()
    store = JobStore(client, heartbeat_ttl=1.0)

    def errors() -> float:
        return sum(
            sample.value
            for family in metrics.REDIS_ERRORS.collect()
            for sample in family.samples
            if sample.name.endswith("_total")
        )

    before = errors()
    ready = threading.Barrier(8)

    def submit(index: int) -> bool:
        ready.wait()
        return add(store, f"crowd-{index}", queue_max=100)

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(submit, range(8)))
    assert errors() == before
    assert client.zcard("imagegen:queued") == 8


def test_a_submit_whose_reply_was_lost_is_queued_once(store, monkeypatch):
    """Redis ran the MULTI but its answer never came back (redis-py then raises WatchError):
    the next try finds the job and queues nothing more."""
    real = redis.client.Pipeline.execute
    lost = []

    def execute_then_lose_the_reply(pipe, *args, **kwargs):
        result = real(pipe, *args, **kwargs)
        if not lost:
            lost.append(True)
            raise redis.WatchError("the connection dropped before the reply")
        return result

    monkeypatch.setattr(redis.client.Pipeline, "execute", execute_then_lose_the_reply)
    assert add(store, "once")
    monkeypatch.undo()
    assert lost
    assert store.redis.lrange("imagegen:unfinished", 0, -1) == [b"once"]
    assert store.redis.zcard("imagegen:queued") == 1


def test_a_submit_that_never_gets_its_turn_is_a_503_not_a_hang(store, monkeypatch):
    """Each try's decision is overtaken (another writer moves the queue every time): after
    SUBMIT_TRIES the submit gives up with the job store's 503, nothing queued."""
    from imagegen.distributed import store as store_module
    from imagegen.errors import JobStoreBusy

    other = store.redis
    real = store._queue_state

    def overtaken(*args, **kwargs):
        state = real(*args, **kwargs)
        other.incr("imagegen:sequence")  # a write the WATCH sees
        return state

    monkeypatch.setattr(store_module, "SUBMIT_TRIES", 3)
    monkeypatch.setattr(store, "_queue_state", overtaken)
    with pytest.raises(JobStoreBusy):
        add(store, "never")
    assert store.redis.zcard("imagegen:queued") == 0
    assert not store.redis.exists("imagegen:job:never")
