"""The registry of synchronous protocol requests in Redis, against a real redis-server, and
the in-process one beside it: a twin joins while the jobs are unfinished, only the last
waiter to leave may cancel, a finished run gives way to a new one that the old run's last
waiter cannot remove, a run kept for an Idempotency-Key outlives its waiters until its TTL,
and in Redis nothing outlives its expiry."""

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from imagegen import services
from imagegen.distributed.runs import RUN, WAITERS, RedisRuns
from imagegen.generation.shared_runs import LocalRuns, RunRegistry
from tests.support.distributed import RedisServer

TTL = 90


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(params=["in-process", "redis"])
def runs(request: pytest.FixtureRequest) -> RunRegistry:
    if request.param == "in-process":
        return LocalRuns()
    client = request.getfixturevalue("redis_server").client()
    client.flushdb()
    return RedisRuns(client, ttl_seconds=TTL)


class Jobs:
    """Stands in for the job queue: submits numbered jobs, and says which are finished,
    each taking `delay` seconds (as a round trip to a busy store would)."""

    def __init__(self, delay: float = 0) -> None:
        self.delay = delay
        self.submitted: list[list[str]] = []
        self.finished: set[str] = set()

    def submit(self, ids: list[str]) -> None:
        time.sleep(self.delay)
        self.submitted.append(ids)

    def unfinished(self, ids: list[str]) -> bool:
        time.sleep(self.delay)
        return not set(ids) <= self.finished


def join(runs: RunRegistry, jobs: Jobs, key: str = "k"):
    return runs.join_or_submit(key, jobs.submit, jobs.unfinished)


def test_a_twin_joins_and_only_the_last_to_leave_is_last(runs):
    jobs = Jobs()
    first, twin = join(runs, jobs), join(runs, jobs)
    assert twin == first and jobs.submitted == [first.jobs]
    other = join(runs, jobs, key="other")  # another request: its own jobs
    assert jobs.submitted == [first.jobs, other.jobs] and other.jobs != first.jobs
    assert runs.leave(twin) is False  # the first still waits: the jobs must not be cancelled
    assert runs.leave(first) is True
    assert join(runs, jobs).jobs == jobs.submitted[2]  # nobody waited any more: a new run


def test_a_finished_run_gives_way_and_its_last_waiter_leaves_the_new_one_alone(runs):
    jobs = Jobs()
    old = join(runs, jobs)
    jobs.finished.update(old.jobs)
    new = join(runs, jobs)  # the same request again, after the jobs finished: queued anew
    assert new.jobs == jobs.submitted[1] != old.jobs and new.token != old.token
    assert runs.leave(old) is True
    assert join(runs, jobs) == new  # still registered: a third twin joins the new run
    assert runs.leave(new) is False and runs.leave(new) is True


def test_identical_requests_at_once_submit_once(runs):
    jobs = Jobs(delay=0.2)
    with ThreadPoolExecutor(6) as pool:
        joined = list(pool.map(lambda _: join(runs, jobs), range(6)))
    assert jobs.submitted == [joined[0].jobs]
    assert all(run == joined[0] for run in joined)


def test_the_last_waiter_leaving_while_a_twin_joins_is_not_the_last(runs):
    jobs = Jobs()
    waiting = join(runs, jobs)
    twin: list = []
    joining = threading.Thread(target=lambda: twin.append(join(runs, Jobs(delay=0.5), "k")))
    joining.start()
    time.sleep(0.2)  # the twin has read the run and is checking its jobs
    assert runs.leave(waiting) is False  # so the giving-up request cancels nothing
    joining.join()
    assert twin == [waiting]


def test_in_redis_every_key_expires_after_the_last_join(redis_server):
    client = redis_server.client()
    client.flushdb()
    runs, jobs = RedisRuns(client, ttl_seconds=TTL), Jobs()
    run = join(runs, jobs)
    keys = (RUN.format(key="k"), WAITERS.format(token=run.token))
    for key in keys:
        assert 0 < client.ttl(key) <= TTL
        client.expire(key, 5)
    assert join(runs, jobs) == run
    assert all(TTL - 5 < client.ttl(key) <= TTL for key in keys)  # renewed by each join
    runs.leave(run)
    runs.leave(run)
    assert client.keys("imagegen:run*") == []


def test_a_job_the_store_forgot_counts_as_finished_so_a_twin_queues_anew():
    from imagegen.backend import current_backend
    from imagegen.services.shared_runs import _unfinished

    assert _unfinished(current_backend(), "a-job-nobody-knows") is False


def test_a_kept_run_outlives_its_last_waiter_so_a_retry_with_its_key_joins_it(runs):
    """An Idempotency-Key's run: its first attempt gave up on an error, its job ran on and
    succeeded; the retry joins it (whether it may is the caller's `unfinished`)."""
    jobs = Jobs()
    first = runs.join_or_submit("k", jobs.submit, jobs.unfinished, keep=True)
    assert runs.leave(first) is True  # the last (only) waiter: it may cancel on a timeout
    jobs.finished.update(first.jobs)
    retry = runs.join_or_submit("k", jobs.submit, lambda ids: True, keep=True)
    assert retry.jobs == first.jobs and jobs.submitted == [first.jobs]
    assert runs.leave(retry) is True
    unkept = join(runs, jobs, key="plain")
    runs.leave(unkept)
    assert join(runs, jobs, key="plain") != unkept  # without a key, nothing outlives its waiters


def test_a_kept_run_is_forgotten_after_the_ttl(redis_server):
    local = LocalRuns(ttl_seconds=0.3)
    client = redis_server.client()
    client.flushdb()
    for runs in (local, RedisRuns(client, ttl_seconds=1)):
        jobs = Jobs()
        runs.leave(runs.join_or_submit("k", jobs.submit, lambda ids: True, keep=True))
        time.sleep(1.2)
        again = runs.join_or_submit("k", jobs.submit, lambda ids: True, keep=True)
        assert again.jobs == jobs.submitted[1] != jobs.submitted[0]
    assert local._current.keys() == {"k"}  # the expired one was dropped, not kept beside it


def test_a_run_is_registered_before_its_jobs_are_queued_so_a_lost_answer_is_joined(runs):
    """The job store took the job, then stopped answering (a frozen Redis after the queueing;
    the client was told to try again): the retry with the same key joins that job, and one
    of a run whose queueing took nothing queues anew."""
    jobs, queued = Jobs(), set()

    def queued_then_unanswered(ids: list[str]) -> None:
        jobs.submit(ids)
        queued.update(ids)
        raise ConnectionError("the job store took the job and stopped answering")

    with pytest.raises(ConnectionError):
        runs.join_or_submit("k", queued_then_unanswered, jobs.unfinished, keep=True)
    retry = runs.join_or_submit("k", jobs.submit, lambda ids: set(ids) <= queued, keep=True)
    assert jobs.submitted == [retry.jobs] and retry.jobs[0] in queued  # joined: one job

    def refused(ids: list[str]) -> None:
        raise ConnectionError("the store was away: nothing queued")

    with pytest.raises(ConnectionError):
        runs.join_or_submit("other", refused, jobs.unfinished, count=2, keep=True)
    anew = runs.join_or_submit(
        "other", jobs.submit, lambda ids: set(ids) <= queued, count=2, keep=True
    )
    assert jobs.submitted[-1] == anew.jobs and len(anew.jobs) == 2  # its ids named no job


def test_a_batch_cut_off_part_way_leaves_no_job_to_run_for_nobody(redis_server, monkeypatch):
    """The store took the batch's second job and its answer was lost (the client is told
    to try again): the first job and the second are both cancelled, so a retry's new run
    does not leave them running for nobody."""
    from imagegen import backend
    from imagegen.distributed.board import RedisJobBoard
    from imagegen.distributed.store import JobStore
    from imagegen.distributed.timings import RedisTimings
    from imagegen.generation.job_board import JobState
    from imagegen.generation.requests import GenerationRequest
    from imagegen.generation.shared_runs import new_job_ids
    from imagegen.services.shared_runs import _submit_batch

    client = redis_server.client()
    client.flushdb()
    store = JobStore(client, heartbeat_ttl=30)
    board = RedisJobBoard(store, models=None, queue_max=8, keep=20, rules=None,
                          timings=RedisTimings(client, "m"))  # fmt: skip
    taken: list[str] = []

    def submit(request, *, owner=None, batch=None, job_id=None, key=None, key_limit=None):
        assert store.add(job_id, request, owner=owner, batch=batch, queue_max=8, keep=20)
        taken.append(job_id)
        if len(taken) == 2:
            raise redis.TimeoutError("the store took it and its answer was lost")

    monkeypatch.setattr(board, "submit", submit)
    monkeypatch.setattr(backend.current_backend(), "jobs", board)
    ids = new_job_ids(3)
    request = GenerationRequest(prompt="q", steps=2, guidance=0.0, seed=1, size=(64, 64))
    with pytest.raises(redis.TimeoutError):
        _submit_batch(
            backend.current_backend(),
            request,
            ids,
            "client",
            timeout=None,
            quota=services.KeyQuota(None, None),
        )
    assert taken == ids[:2]
    assert [store.view(i).state for i in taken] == [JobState.CANCELLED, JobState.CANCELLED]
    assert store.view(ids[2]) is None  # never tried


def test_a_refused_submit_unregisters_its_run_at_once(runs, redis_server):
    """A full queue or a key's limit refused it: nothing queued, so nothing stays registered
    for the TTL (a client sending refused requests leaves nothing behind); a retry queues
    anew. A store that stopped answering (above) keeps its run: it may have taken a job."""
    from imagegen.errors import QueueFull

    jobs = Jobs()

    def full(ids: list[str]) -> None:
        raise QueueFull()

    for keep in (False, True):
        with pytest.raises(QueueFull):
            runs.join_or_submit("k", full, jobs.unfinished, count=2, keep=keep)
        if isinstance(runs, LocalRuns):
            assert runs._current == {} and runs._expires == {}
        else:
            assert redis_server.client().keys("imagegen:run*") == []
    retry = join(runs, jobs)
    assert jobs.submitted == [retry.jobs]
