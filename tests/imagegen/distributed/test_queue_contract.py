"""The queue's rules as a client meets them, the same tests on both job boards: the in-process
queue on the real tiny pipeline, and the Redis board against a real redis-server. A full queue
and a key at its limit are refused with nothing queued, two keys take fair turns, and old
finished jobs are forgotten (imagegen.generation.queue_policy, applied by each board)."""

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from celery import Celery
from django.test import override_settings

from imagegen.backend import rules_from_settings
from imagegen.distributed.board import RedisJobBoard
from imagegen.distributed.store import JobStore
from imagegen.distributed.timings import RedisTimings
from imagegen.errors import KeyQueueLimit, QueueFull
from imagegen.generation.images import ImageStore
from imagegen.generation.job_board import JobBoard, JobState, JobView
from imagegen.generation.jobs import JobQueue
from imagegen.generation.requests import GenerationRequest
from imagegen.model.loader import ModelLoader
from tests.imagegen.distributed.test_job_store import redis_server  # noqa: F401 (the module's Redis)
from tests.support.distributed import RedisServer
from tests.support.loaders import pulled_loader

LONG = GenerationRequest(prompt="a long one", steps=400, size=(64, 64), seed=2)
QUEUE_MAX, KEEP = 3, 2


@pytest.fixture(scope="module")
def loader(hub_root: Path, tmp_path_factory: pytest.TempPathFactory) -> ModelLoader:
    return pulled_loader(hub_root, tmp_path_factory.mktemp("contract"))


@dataclass
class Board:
    """A board with one job running, as a client finds a busy service: `busy` that job's id.
    `started` holds the ids to cancel when the test ends."""

    jobs: JobBoard
    run_head: Callable[[], object]  # a worker takes the job at the head of the queue
    busy: str = ""
    started: list[str] = field(default_factory=list)

    def submit(self, key: str | None = None, key_limit: int | None = None) -> JobView:
        view = self.jobs.submit(LONG, key=key, key_limit=key_limit)
        self.started.append(view.id)
        return view

    def position(self, job_id: str) -> int | None:
        view = self.jobs.lookup(job_id)
        assert view is not None, job_id
        return view.position


def wait_running(jobs: JobBoard, job_id: str) -> None:
    deadline = time.monotonic() + 60
    while (view := jobs.lookup(job_id)) is None or view.state is not JobState.RUNNING:
        assert time.monotonic() < deadline, view
        time.sleep(0.01)


@pytest.fixture(params=["in-process", "redis"])
def board(request: pytest.FixtureRequest, loader: ModelLoader, tmp_path: Path) -> Iterator[Board]:
    with override_settings(MODEL_ID=loader.source.model_id, MODEL_ADAPTERS=()):
        rules = rules_from_settings()
    if request.param == "in-process":
        queue = JobQueue(loader, ImageStore(tmp_path / "images"), queue_max=QUEUE_MAX,
                         load_timeout=60, keep=KEEP, rules=rules)  # fmt: skip
        made = Board(queue, run_head=lambda: None)  # its worker thread takes the head itself
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        client = server.client()
        client.flushdb()
        store = JobStore(client, heartbeat_ttl=120.0)  # no worker is lost in these tests
        timings = RedisTimings(client, "contract")
        redis_board = RedisJobBoard(store, models=loader, queue_max=QUEUE_MAX, keep=KEEP,
                                    rules=rules, timings=timings)  # fmt: skip
        # Its wake-up messages go to a real broker on the same Redis; no Celery worker reads
        # them: the test's `run_head` is the worker.
        redis_board.__dict__["_celery"] = Celery(broker=server.url)
        made = Board(redis_board, run_head=lambda: store.claim("w1"))
    made.busy = made.submit(key="busy").id
    made.run_head()
    wait_running(made.jobs, made.busy)
    yield made
    for job_id in made.started:
        view = made.jobs.lookup(job_id)
        if view is not None and view.state in (JobState.QUEUED, JobState.RUNNING):
            made.jobs.cancel(job_id)


def test_a_full_queue_refuses_a_job_with_nothing_queued(board: Board):
    waiting = [board.submit(key=f"k{n}").id for n in range(QUEUE_MAX)]
    before = {view.id for view in board.jobs.recent(50)}
    with pytest.raises(QueueFull):
        board.submit(key="late")
    assert {view.id for view in board.jobs.recent(50)} == before
    assert [board.position(job_id) for job_id in waiting] == [1, 2, 3]


def test_a_key_over_its_limit_is_refused_with_nothing_queued(board: Board):
    first = board.submit(key="erin", key_limit=2).id
    before = {view.id for view in board.jobs.recent(50)}
    with pytest.raises(KeyQueueLimit):
        board.submit(key="erin", key_limit=1)  # erin has one waiting: at a limit of 1
    assert {view.id for view in board.jobs.recent(50)} == before
    # The running job counts too: "busy" is at a limit of 1 with nothing waiting.
    with pytest.raises(KeyQueueLimit):
        board.submit(key="busy", key_limit=1)
    assert board.submit(key="bob", key_limit=1).id  # another key is not counted against hers
    assert board.position(first) == 1


def test_two_keys_take_turns(board: Board):
    a1, a2 = board.submit(key="a").id, board.submit(key="a").id
    b1 = board.submit(key="b").id  # arrives last, runs before a's second
    assert [board.position(job_id) for job_id in (a1, b1, a2)] == [1, 2, 3]


def test_old_finished_jobs_are_forgotten(board: Board):
    done = [board.submit(key="k").id for _ in range(3)]
    for job_id in done:
        board.jobs.cancel(job_id)  # finished: cancelled before it ran
    board.submit(key="k")  # a job queued is when the board forgets
    assert board.jobs.lookup(done[0]) is None  # of 3 finished, the KEEP=2 newest are kept
    assert [board.jobs.lookup(job_id).state for job_id in done[1:]] == [JobState.CANCELLED] * 2
    assert board.jobs.lookup(board.busy).state is JobState.RUNNING  # unfinished: never
