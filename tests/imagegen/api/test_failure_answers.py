"""What a client is told when a generation does not end with an image, by one rule: 503 with
Retry-After where a retry can help (the job's worker was lost, the job store unreachable), 500
where it cannot (the pipeline raised: the same request raises again), and under /v1 the
openai SDK's `x-should-retry` saying the same. In process, in both job modes where the case
exists: the tiny pipeline made to raise, run by the in-process queue and by distributed mode's
worker runtime on a real redis-server; the service call a route makes, and the answer the
project's error handlers make of what it raises."""

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from django.http import HttpResponse
from django.test import RequestFactory, override_settings

from config.urls import api
from core.errors import ServiceError
from imagegen import backend, services
from imagegen.backend import current_backend
from imagegen.distributed.board import RedisJobBoard
from imagegen.distributed.store import JobStore
from imagegen.distributed.timings import RedisTimings
from imagegen.errors import JobFailed, JobStoreBusy
from imagegen.generation.images import ImageStore
from imagegen.generation.job_board import FINISHED, JobBoard, JobView
from imagegen.generation.jobs import JobQueue
from imagegen.generation.requests import GenerationRequest
from imagegen.model.loader import ModelLoader
from tests.support.distributed import RedisServer
from tests.support.loaders import pulled_loader
from tests.support.processes import free_port
from tests.support.solo_worker import solo_worker

REQUEST = GenerationRequest(prompt="a harbour", steps=2, guidance=0.0, seed=3, size=(64, 64))
ROUTES = ("/generate", "/v1/images/generations")


@pytest.fixture(scope="module")
def loader(hub_root: Path, tmp_path_factory: pytest.TempPathFactory) -> ModelLoader:
    return pulled_loader(hub_root, tmp_path_factory.mktemp("failures"))


@dataclass
class Mode:
    jobs: JobBoard
    submit: Callable[[GenerationRequest], str]


@contextlib.contextmanager
def in_process(loader: ModelLoader, images: Path) -> Iterator[Mode]:
    with override_settings(MODEL_ID=loader.source.model_id, MODEL_ADAPTERS=(), GEN_DEFAULT_STEPS=2):
        rules = backend.rules_from_settings()
    jobs = JobQueue(loader, ImageStore(images), queue_max=4, load_timeout=60, keep=20, rules=rules)
    yield Mode(jobs, lambda request: jobs.submit(request).id)


@contextlib.contextmanager
def distributed(loader: ModelLoader, images: Path, server: RedisServer) -> Iterator[Mode]:
    with solo_worker(loader, images, server) as solo:
        yield Mode(solo.board, solo.submit)


@pytest.fixture(params=["in-process", "distributed"])
def mode(
    request: pytest.FixtureRequest,
    loader: ModelLoader,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Mode]:
    if request.param == "in-process":
        made = in_process(loader, tmp_path / "images")
    else:
        made = distributed(loader, tmp_path / "images", request.getfixturevalue("redis_server"))
    with made as mode:
        monkeypatch.setattr(backend.current_backend(), "jobs", mode.jobs)  # what the services call
        yield mode


@pytest.fixture
def unet_raises(loader: ModelLoader) -> Iterator[None]:
    def fail(*_: object) -> None:
        raise RuntimeError("the UNet raised")

    handle = loader.pipeline(60).unet.register_forward_pre_hook(fail)
    yield
    handle.remove()


def answers(error: Exception, method: str = "post") -> dict[str, HttpResponse]:
    """The answer to `error` on each route, as the project's handlers make it."""
    factory = RequestFactory()
    return {path: api.on_exception(getattr(factory, method)(path), error) for path in ROUTES}


def finished(mode: Mode, job_id: str) -> JobView:
    view = mode.jobs.wait(job_id, 60)
    assert view is not None and view.state in FINISHED, view
    return view


def test_a_generation_that_raised_is_500_without_retry_after_in_both_modes(mode, unet_raises):
    job = finished(mode, mode.submit(REQUEST))
    with pytest.raises(JobFailed) as failed:
        services.generation_result(current_backend(), job=job, timeout=10)
    assert failed.value.status == 500 and failed.value.retry_after is None
    assert "the UNet raised" in failed.value.message
    native, openai = answers(failed.value).values()
    assert native.status_code == openai.status_code == 500
    assert "Retry-After" not in native and "Retry-After" not in openai
    assert openai["x-should-retry"] == "false"  # the SDK does not send it again


def test_a_job_whose_worker_was_lost_is_503_with_retry_after(redis_server, monkeypatch):
    client = redis_server.client()
    client.flushdb()
    store = JobStore(client, heartbeat_ttl=1.0)
    board = RedisJobBoard(
        store, models=None, queue_max=4, keep=20, rules=None,
        timings=RedisTimings(client, "test-model"),
    )  # fmt: skip
    monkeypatch.setattr(backend.current_backend(), "jobs", board)
    assert store.add("a", REQUEST, owner=None, batch=None, queue_max=4, keep=20)
    for worker in ("w1", "w2"):  # each dies under it: it runs once more, then fails
        assert store.claim(worker).job_id == "a"
        deadline = time.monotonic() + 1.2  # a TTL with the store reachable and no beat of it
        while time.monotonic() < deadline:
            store.beat("no such job", 1)  # the clock ticks, as live workers' beats make it
            time.sleep(0.1)
        store.sweep()
    with pytest.raises(ServiceError) as lost:
        services.generation_result(current_backend(), job=board.lookup("a"), timeout=5)
    assert lost.value.status == 503 and lost.value.retry_after
    assert "worker lost: job a" in lost.value.message
    for answer in answers(lost.value).values():
        assert answer.status_code == 503 and int(answer["Retry-After"]) > 0
    assert answers(lost.value)["/v1/images/generations"]["x-should-retry"] == "true"


def test_the_job_store_unreachable_is_503_and_a_generation_is_told_to_retry_with_its_key():
    with pytest.raises(redis.ConnectionError) as unreachable:
        redis.Redis(port=free_port(), socket_connect_timeout=1).ping()
    for path, answer in answers(unreachable.value).items():
        assert answer.status_code == 503 and int(answer["Retry-After"]) > 0, path
        assert "send the request again with the same Idempotency-Key" in answer.content.decode()
    assert answers(unreachable.value)["/v1/images/generations"]["x-should-retry"] == "true"
    read = api.on_exception(RequestFactory().get("/jobs"), unreachable.value)
    assert read.status_code == 503 and b"Idempotency-Key" not in read.content  # nothing queued


def test_a_store_too_busy_after_a_generation_was_queued_says_to_retry_with_its_key():
    # JobStoreBusy is a ServiceError and a redis ConnectionError: its handler is its own.
    busy = JobStoreBusy()
    for path, answer in answers(busy).items():
        assert answer.status_code == 503 and int(answer["Retry-After"]) > 0, path
        assert "send the request again with the same Idempotency-Key" in answer.content.decode()
    read = api.on_exception(RequestFactory().get("/jobs"), busy)
    assert read.status_code == 503 and b"Idempotency-Key" not in read.content
