"""GET /metrics in process: the real app's routes (Django's test client) on a real tiny
pipeline, the scrape parsed by prometheus_client's own parser. The families are the process's,
so each test reads how far they moved, not their values."""

import contextlib
import io
import json
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from django.test import Client, RequestFactory
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from pymongo.errors import ServerSelectionTimeoutError

from core import request_context
from core.logs import JsonFormatter
from imagegen.distributed.connection import store_client
from imagegen.errors import JobFinished
from imagegen.generation.jobs import JobQueue
from imagegen.generation.requests import EditRequest, GenerationRequest
from imagegen.model.loader import ModelLoader
from imagegen.scrape import WorkerState
from tests.support.loaders import pulled_loader, serve
from tests.support.processes import ROOT, free_port
from todos.errors import on_database_error

Samples = dict[tuple[str, frozenset], float]


def scrape(client: Client) -> Samples:
    response = client.get("/metrics")
    assert response.status_code == 200, response.content
    samples: Samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture(scope="module")
def loader(hub_root: Path, tmp_path_factory: pytest.TempPathFactory) -> ModelLoader:
    return pulled_loader(hub_root, tmp_path_factory.mktemp("metrics"))


@pytest.fixture
def queue(loader, tmp_path, monkeypatch) -> Iterator[JobQueue]:
    jobs = serve(loader, tmp_path / "images", monkeypatch)
    yield jobs
    for job in jobs.unfinished():  # a failed test's jobs end before the next test's
        with contextlib.suppress(JobFinished):
            jobs.cancel(job.id)
        jobs.wait(job.id, 60)


def wait_state(queue: JobQueue, job_id: str, state: str, *, steps: int = 0) -> None:
    deadline = time.monotonic() + 60
    while True:
        view = queue.lookup(job_id)
        assert view is not None
        if view.state == state and view.progress.step >= steps:
            return
        assert time.monotonic() < deadline, view
        time.sleep(0.01)


def submit(client: Client, **fields: str) -> dict:
    response = client.post("/generate", {**fields, "async": "true"}, HTTP_X_REQUEST_ID="rid-1")
    assert response.status_code == 202, response.content
    return response.json()


def test_counters_and_gauges_move_as_a_job_is_queued_runs_and_ends(queue):
    client = Client()
    before = scrape(client)
    long = submit(client, prompt="long", steps="100", size="128x128")
    wait_state(queue, long["id"], "running", steps=1)
    short = submit(client, prompt="short", steps="3", size="64x64")

    waiting = scrape(client)  # one running, one waiting behind it
    assert value(waiting, "imagegen_jobs_queued") == 1
    assert value(waiting, "imagegen_jobs_running") == 1
    assert value(waiting, "imagegen_model_state", state="ready") == 1
    assert value(waiting, "imagegen_model_pull_size_bytes") > 0
    surface = "imagegen_jobs_submitted_total"
    assert value(waiting, surface, surface="native") - value(before, surface, surface="native") == 2

    assert client.delete(f"/jobs/{long['id']}").status_code == 200
    wait_state(queue, short["id"], "succeeded")
    after = scrape(client)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert value(after, "imagegen_jobs_queued") == 0
    assert value(after, "imagegen_jobs_running") == 0
    assert moved("imagegen_jobs_finished_total", outcome="succeeded") == 1
    assert moved("imagegen_jobs_finished_total", outcome="cancelled") == 1
    assert moved("imagegen_step_seconds_count", size="64x64") == 3  # the short job's steps
    assert moved("imagegen_decode_seconds_count", size="64x64") == 1
    assert moved("imagegen_job_queue_seconds_count") == 2
    assert moved("imagegen_job_run_seconds_count") == 2
    assert moved("imagegen_step_seconds_sum", size="64x64") > 0
    # The HTTP side, by route template: the two submissions and the cancel.
    http = "django_http_responses_total_by_status_view_method_total"
    assert moved(http, method="POST", status="202", view="/generate") == 2
    assert moved(http, method="DELETE", status="200", view="/jobs/<job_id>") == 1


def test_a_job_cancelled_while_it_waits_counts_as_cancelled(queue):
    client = Client()
    long = submit(client, prompt="long", steps="100", size="128x128")
    wait_state(queue, long["id"], "running", steps=1)
    waiting = submit(client, prompt="waits", steps="2", size="64x64")
    before = scrape(client)
    assert client.delete(f"/jobs/{waiting['id']}").status_code == 200
    assert client.delete(f"/jobs/{long['id']}").status_code == 200
    wait_state(queue, long["id"], "cancelled")
    after = scrape(client)
    name = "imagegen_jobs_finished_total"
    assert value(after, name, outcome="cancelled") - value(before, name, outcome="cancelled") == 2


def test_the_protocol_routes_count_their_own_surface(queue):
    client = Client()
    before = scrape(client)
    answer = client.post(
        "/v1/images/generations",
        {"prompt": "a fox", "size": "64x64", "n": 2, "response_format": "b64_json"},
        content_type="application/json",
    )
    assert answer.status_code == 200, answer.content
    answer = client.post(
        "/sdapi/v1/txt2img", {"prompt": "a fox", "width": 64, "height": 64, "steps": 2},
        content_type="application/json",
    )  # fmt: skip
    assert answer.status_code == 200, answer.content
    after = scrape(client)
    name = "imagegen_jobs_submitted_total"
    for surface, count in (("openai", 2), ("a1111", 1), ("native", 0)):
        moved = value(after, name, surface=surface) - value(before, name, surface=surface)
        assert moved == count, surface


def test_an_open_event_stream_counts_until_it_closes(queue):
    client = Client()
    job = submit(client, prompt="streamed", steps="2", size="64x64")
    before = value(scrape(client), "imagegen_event_streams_open")
    stream = client.get(f"/jobs/{job['id']}/events")
    assert stream.status_code == 200
    assert value(scrape(client), "imagegen_event_streams_open") == before + 1
    stream.close()
    assert value(scrape(client), "imagegen_event_streams_open") == before


def test_a_job_carries_its_requests_id(queue):
    job = submit(Client(), prompt="traced", steps="2", size="64x64")
    view = queue.lookup(job["id"])
    assert view is not None and view.request_id == "rid-1"


def test_todo_requests_refused_for_the_database_are_counted():
    client = Client()
    before = value(scrape(client), "todos_requests_refused_database_total", reason="unreachable")
    request = RequestFactory().get("/todos")
    answer = on_database_error(request, ServerSelectionTimeoutError("no server"))
    assert answer.status_code == 503
    after = value(scrape(client), "todos_requests_refused_database_total", reason="unreachable")
    assert after == before + 1


def test_a_failed_job_store_call_is_counted_once_its_retries_are_spent():
    client = Client()
    name = "imagegen_redis_errors_total"
    before = value(scrape(client), name, error="ConnectionError")
    nobody = store_client(f"redis://127.0.0.1:{free_port()}/0", timeout=1, max_waiting=None)
    with contextlib.suppress(redis.ConnectionError), pytest.raises(redis.ConnectionError):
        nobody.get("x")
    assert value(scrape(client), name, error="ConnectionError") == before + 1


def test_a_scrape_answers_even_when_the_job_board_does_not(monkeypatch, caplog):
    from imagegen import backend

    class Unreachable:
        def unfinished(self):
            raise redis.ConnectionError("away")

    monkeypatch.setattr(backend.current_backend(), "jobs", Unreachable())
    with caplog.at_level(logging.WARNING):
        samples = scrape(Client())
    assert ("imagegen_jobs_queued", frozenset()) not in samples
    assert ("imagegen_event_streams_open", frozenset()) in samples


FAMILY = re.compile(r"\b((?:imagegen|todos|django_http)_[a-z_]+)\b")
SUFFIXES = ("", "_total", "_bucket", "_sum", "_count", "_created")


def exported_families(loader: ModelLoader) -> set[str]:
    """Every family a web process's scrape and a worker's port answer with."""
    web = Client().get("/metrics").content.decode()
    worker = generate_latest(worker_registry(loader)).decode()
    return {
        family.name for text in (web, worker) for family in text_string_to_metric_families(text)
    }


def worker_registry(loader: ModelLoader) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(WorkerState(loader.status, lambda: False))
    return registry


def named(names: set[str], families: set[str]) -> set[str]:
    """The names that are not a family or one of its series."""
    return {
        n
        for n in names
        if not any(n.removesuffix(s) in families for s in SUFFIXES if n.endswith(s))
    }


def test_the_docs_and_the_dashboard_name_only_exported_families(queue, loader):
    families = exported_families(loader)
    docs = set(FAMILY.findall((ROOT / "docs" / "metrics.md").read_text()))
    dashboard = json.loads((ROOT / "deploy" / "grafana-dashboard.json").read_text())
    exprs = {t["expr"] for panel in dashboard["panels"] for t in panel["targets"]}
    in_dashboard = {name for expr in exprs for name in FAMILY.findall(expr)}
    assert named(docs, families) == set()
    assert named(in_dashboard, families) == set()
    ours = {f for f in families if f.startswith(("imagegen_", "todos_"))}
    documented = docs | {n.removesuffix("_total") for n in docs}
    assert ours - documented == set()  # each one documented


def test_a_jobs_log_lines_carry_its_id_and_its_requests_in_process(queue):
    """The generation thread logs within the job's scope: a job whose edit input is missing
    from the store fails, and its log line, as JSON, names the job and the request."""
    lines = io.StringIO()
    handler = logging.StreamHandler(lines)
    handler.setFormatter(JsonFormatter())
    logging.getLogger("imagegen.generation.execution").addHandler(handler)
    missing = EditRequest(source="0" * 64)
    try:
        with request_context.request_scope(rid="rid-in-thread", path="/generate"):
            job = queue.submit(GenerationRequest(prompt="x", steps=2, size=(64, 64), edit=missing))
        assert queue.wait(job.id, 60).state == "failed"
    finally:
        logging.getLogger("imagegen.generation.execution").removeHandler(handler)
    logged = [json.loads(line) for line in lines.getvalue().splitlines()]
    assert any(
        line["job_id"] == job.id and line["request_id"] == "rid-in-thread" for line in logged
    ), logged


def test_the_size_label_is_one_of_a_fixed_handful_whatever_sizes_are_sent():
    """Any multiple of 8 per side is allowed (tens of thousands of sizes): each is counted
    with the square nearest in pixels, and a common square is itself."""
    from imagegen.metrics import SIZE_CLASSES, image_size

    labels = {image_size(w, h) for w in range(64, 2049, 8) for h in range(64, 2049, 40)}
    assert labels == {f"{side}x{side}" for side in SIZE_CLASSES}
    assert (image_size(1024, 1024), image_size(832, 1216), image_size(512, 768)) == (
        "1024x1024", "1024x1024", "512x512"
    )  # fmt: skip


def test_two_first_scrapes_at_once_register_the_scrape_state_once(monkeypatch):
    """A registration that takes a moment (prometheus_client collects once to check the
    names): two first scrapes at once would both register, and one would answer 500."""
    import threading
    import time

    from prometheus_client import REGISTRY

    from imagegen.api import metrics as route

    for state in route._registered:
        REGISTRY.unregister(state)
    monkeypatch.setattr(route, "_registered", [])
    register = REGISTRY.register

    def slow(collector):
        time.sleep(0.1)
        register(collector)

    monkeypatch.setattr(REGISTRY, "register", slow)
    errors: list[BaseException] = []

    def first_scrape():
        try:
            route._web_state_registered()
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=first_scrape) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(route._registered) == 1
