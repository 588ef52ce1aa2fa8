"""The in-process queue with two models and room for one: jobs for the model in memory run
ahead of jobs that need a swap, within queue_policy's bound, so a mix swaps less than its
arrival order would, and the positions clients see are the order jobs run in; a swap is a
phase (the job, its event stream, A1111's /progress, the incoming model `loading` in
/model/status) and part of a synchronous request's estimate; a cancel reaches a job waiting
for one, and a swap that fails fails its job naming the model while the next job runs. Served
here (served_here): MODEL_ID the tiny SD model, MODELS the tiny SDXL one, both pulled once."""

import itertools
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from django.test import override_settings

from imagegen.generation.queue_policy import OVERTAKE_LIMIT
from imagegen.generation.work import LoadTimes
from imagegen.model.shelf import ModelShelf
from tests.support import sse
from tests.support.in_process import LoopbackApp, served_here
from tests.support.local_hub import LocalHub
from tests.support.model_service import (
    PULL_TIMEOUT,
    SD_REPO,
    SDXL_REPO,
    model_service_env,
    pull_until_ready,
)
from tests.support.sse import open_stream

A, B = SD_REPO, SDXL_REPO
# Every field the two models' defaults could differ on, sent.
FIELDS = {"prompt": "a red cube", "seed": "7", "steps": "2", "guidance": "5", "size": "64x64"}
FINISHED = ("succeeded", "failed", "cancelled")
SYNC_TIMEOUT = 30  # GEN_SYNC_TIMEOUT: refused past 1.25 x this


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models-queue")


@pytest.fixture(scope="module")
def app(hub_root: Path, work: Path) -> Iterator[LoopbackApp]:
    with LocalHub(hub_root) as hub:
        env = model_service_env(hub.url, work / "share", work)
        with served_here(
            **env, MODELS=B, GEN_QUEUE_MAX="16", GEN_SYNC_TIMEOUT=str(SYNC_TIMEOUT)
        ) as served:
            pull_until_ready(served)
            pulled = requests.post(served.url("/model/pull"), data={"model": B}, timeout=30)
            assert pulled.status_code in (200, 202), pulled.text
            until(lambda: state_of(served, B) == "ready", PULL_TIMEOUT["in-process"])
            yield served


class Gates:
    """Holds a model's load open (a hook in its loading thread, ModelLoader.at_load) until
    opened; every gate opens at the test's end, so a failing test leaves no load hanging."""

    def __init__(self) -> None:
        self.opened: list[threading.Event] = []

    def close(self, shelf: ModelShelf, model: str) -> threading.Event:
        gate = threading.Event()
        self.opened.append(gate)
        shelf.loader(model).at_load.append(lambda: gate.wait(120) and None)
        return gate


@pytest.fixture
def shelf(app: LoopbackApp) -> Iterator[ModelShelf]:
    """Room for one model and nothing resident, as after a start; the hooks a test adds are
    removed after it."""
    shelf = app.backend.shelf
    assert shelf is not None
    hooks = {model: list(loader.at_load) for model, loader in shelf.loaders.items()}
    until(lambda: not app.backend.jobs.unfinished())
    shelf.limit = 1
    for loader in shelf.loaders.values():
        until(lambda loader=loader: loader.status().state in ("ready", "not_started", "failed"))
        loader.free()
    assert shelf.resident() == []
    yield shelf
    for model, loader in shelf.loaders.items():
        loader.at_load[:] = hooks[model]


@pytest.fixture
def gates() -> Iterator[Gates]:
    found = Gates()
    yield found
    for gate in found.opened:
        gate.set()


def loads_of(shelf: ModelShelf) -> list[str]:
    """Each model's load, in order, as its loading thread finishes it."""
    loads: list[str] = []
    for model, loader in shelf.loaders.items():
        loader.at_load.append(lambda model=model: loads.append(model))
    return loads


def test_jobs_for_the_model_in_memory_run_first_within_the_bound_so_a_mix_swaps_less(
    app, shelf, gates
):
    """Behind a running A job: B, A, B, A, B, A, A arrive. The A jobs run first until B's
    first job has been passed OVERTAKE_LIMIT times; then B's jobs run, the last A after them:
    3 loads where the arrival order makes 7. Each queued job's position is its place in that
    order from the start."""
    assert OVERTAKE_LIMIT == 3  # the mix below is built on it
    loads = loads_of(shelf)
    gate = gates.close(shelf, A)
    first = submit(app)
    until(lambda: job(app, first)["state"] == "running")
    arrivals = ["B1", "A2", "B2", "A3", "B3", "A4", "A5"]
    ids = {"B1": submit(app, model=B)}
    assert job(app, ids["B1"])["position"] == 1  # alone in the queue
    ids |= {name: submit(app, model=B if name[0] == "B" else None) for name in arrivals[1:]}
    expected = ["A2", "A3", "A4", "B1", "B2", "B3", "A5"]
    positions = {name: job(app, ids[name])["position"] for name in arrivals}
    assert positions == {name: expected.index(name) + 1 for name in arrivals}
    gate.set()
    ids["A1"] = first
    until(lambda: all(job(app, i)["state"] in FINISHED for i in ids.values()))
    records = {name: job(app, i) for name, i in ids.items()}
    assert {r["state"] for r in records.values()} == {"succeeded"}, records
    ran = sorted(records, key=lambda name: records[name]["started_at"])
    assert ran == ["A1", *expected]
    assert loads == [A, B, A]
    by_arrival = [A] + [B if name[0] == "B" else A for name in arrivals]
    swaps = sum(1 for before, after in itertools.pairwise(by_arrival) if before != after)
    assert len(loads) < 1 + swaps == 7


def test_a_swap_is_a_phase_of_the_job_its_events_and_progress_and_the_incoming_model_loads(
    app, shelf, gates
):
    """An A1111 txt2img choosing B while A is in memory: its job's phase names the load, its
    event stream and /sdapi/v1/progress show it, /model/status has B `loading`."""
    assert generate(app).status_code == 200  # A in memory
    gate = gates.close(shelf, B)
    answers: list[requests.Response] = []
    body = {"prompt": "a swap", "seed": 7, "steps": 2, "cfg_scale": 5, "width": 64,
            "height": 64, "override_settings": {"sd_model_checkpoint": B}}  # fmt: skip
    sent = threading.Thread(
        target=lambda: answers.append(
            requests.post(app.url("/sdapi/v1/txt2img"), json=body, timeout=120)
        )
    )
    sent.start()
    phase = f"loading model {B}"
    until(lambda: any(j["phase"] == phase for j in jobs(app)))
    swapping = next(j for j in jobs(app) if j["phase"] == phase)
    assert state_of(app, B) == "loading" and state_of(app, A) == "not_started"
    progress = requests.get(app.url("/sdapi/v1/progress"), timeout=30).json()
    assert progress["textinfo"] == phase and progress["state"]["job_count"] == 1
    with open_stream(app.url(f"/jobs/{swapping['id']}/events")) as stream:
        events = read_events(stream)
        shown = next(events)
        assert (shown.name, shown.data["phase"]) == ("running", phase)
        gate.set()
        names = [event.name for event in events]
    assert names[-1] == "succeeded"
    sent.join(120)
    assert answers[0].status_code == 200, answers[0].text
    assert state_of(app, B) == "ready"


def test_with_models_unset_a_load_keeps_its_phase(app, work, gates):
    """One model offered (the module's share, MODEL_ID on it): its first load is no swap, and
    its job's phase is `loading the model`, as before MODELS."""
    env = model_service_env("http://127.0.0.1:9", work / "share", work / "alone")
    # The module's app set MODELS: settings_for gives only what differs from this process's.
    with override_settings(MODELS=""), served_here(**env) as alone:
        assert alone.backend.shelf is not None
        gate = gates.close(alone.backend.shelf, A)
        loading = submit(alone)
        until(lambda: job(alone, loading)["state"] == "running")
        assert job(alone, loading)["phase"] == "loading the model"
        gate.set()
        until(lambda: job(alone, loading)["state"] in FINISHED)
        assert job(alone, loading)["state"] == "succeeded"


def test_a_synchronous_request_that_a_swap_makes_too_slow_is_refused_at_once(app, shelf, gates):
    """B's load estimated from its fp32 size at a pace that makes it longer than the
    synchronous limit: a request for B is refused with the estimate, nothing queued, while
    one for A in memory runs, and so does one for B behind a job that loads B. Once a swap to
    B was measured, that figure counts instead."""
    assert generate(app).status_code == 200  # A in memory, an image measured
    newest = jobs(app)[0]["id"]
    b_bytes = app.backend.jobs.loads.size(shelf.loader(B))
    assert b_bytes > 0
    saved = app.backend.jobs.loads
    app.backend.jobs.loads = LoadTimes(rate=b_bytes / (2 * SYNC_TIMEOUT))
    try:
        refused = generate(app, model=B)
        assert refused.status_code == 400, refused.text
        message = refused.json()["error"]["message"]
        assert message.startswith("This request would take about "), message
        assert f"after {2 * SYNC_TIMEOUT} s to load its model first (a swap)" in message
        assert jobs(app)[0]["id"] == newest  # nothing queued
        assert generate(app).status_code == 200
        gate = gates.close(shelf, B)
        measured = submit(app, model=B)  # asynchronous: taken whatever its estimate
        until(lambda: job(app, measured)["phase"] == f"loading model {B}")
        answers: list[requests.Response] = []
        behind = threading.Thread(target=lambda: answers.append(generate(app, model=B)))
        behind.start()
        until(lambda: bool(answers) or len(jobs(app, unfinished="true")) == 2)  # queued
        gate.set()
        behind.join(120)
        assert answers[0].status_code == 200, answers[0].text
        assert job(app, measured)["state"] == "succeeded"
        assert submit_and_wait(app) == "succeeded"  # A back: B is to be loaded again
        assert shelf.resident() == [A]
        assert generate(app, model=B).status_code == 200  # its measured swap, well in time
    finally:
        app.backend.jobs.loads = saved


def test_a_cancel_reaches_jobs_waiting_for_a_swap_and_the_load_runs_to_its_end(app, shelf, gates):
    """Two B jobs while A is in memory: the first waits in B's load, the second behind it.
    Cancelled, both end cancelled; the load ends and B stays loaded."""
    assert generate(app).status_code == 200
    gate = gates.close(shelf, B)
    loading, behind = submit(app, model=B), submit(app, model=B)
    until(lambda: job(app, loading)["phase"] == f"loading model {B}")
    assert job(app, behind)["state"] == "queued"
    for job_id in (behind, loading):
        assert requests.delete(app.url(f"/jobs/{job_id}"), timeout=30).status_code == 200
    assert job(app, behind)["state"] == "cancelled"
    until(lambda: job(app, loading)["state"] in FINISHED, timeout=60)
    assert job(app, loading)["state"] == "cancelled"
    assert state_of(app, B) == "loading"
    gate.set()
    until(lambda: state_of(app, B) == "ready")
    assert shelf.resident() == [B]


@pytest.mark.parametrize("damage", ["gone", "unreadable"])
def test_a_swap_that_fails_fails_its_job_naming_the_model_and_the_next_job_runs(
    app, shelf, gates, damage, tmp_path
):
    """B's weights gone from the share, or a file of it unreadable, after its job was queued
    behind an A job: that job fails naming B; the next A job runs. B's copy repaired and
    pulled, it runs again."""
    gate = gates.close(shelf, A)
    first = submit(app)
    until(lambda: job(app, first)["state"] == "running")
    failing = submit(app, model=B)
    weights = next((shelf.loader(B).source.path / "unet").glob("*.safetensors"))
    kept = tmp_path / weights.name  # moved, not written over: share files may be links
    shutil.move(weights, kept)
    try:
        if damage == "unreadable":
            weights.write_bytes(b"\xff" * kept.stat().st_size)  # its size, not its content
        gate.set()
        until(lambda: job(app, failing)["state"] in FINISHED)
        record = job(app, failing)
        assert record["state"] == "failed"
        if damage == "gone":
            assert record["error"].startswith(f"The model {B} is offered but not on the share")
        else:
            assert record["error"].startswith(f"The model {B} failed to load: "), record
            assert record["error"].endswith(f"POST /model/pull?model={B} to retry")
        assert job(app, first)["state"] == "succeeded"
        assert submit_and_wait(app) == "succeeded"
    finally:
        weights.unlink(missing_ok=True)
        shutil.move(kept, weights)
    pulled = requests.post(app.url("/model/pull"), data={"model": B}, timeout=30)
    assert pulled.status_code in (200, 202), pulled.text
    until(lambda: state_of(app, B) in ("ready", "failed"))
    assert state_of(app, B) == "ready"
    assert generate(app, model=B).status_code == 200


def generate(app: LoopbackApp, **fields: str | None) -> requests.Response:
    data = {**FIELDS, **{name: value for name, value in fields.items() if value is not None}}
    return requests.post(app.url("/generate"), data=data, timeout=120)


def submit(app: LoopbackApp, **fields: str | None) -> str:
    made = generate(app, **fields, **{"async": "true"})
    assert made.status_code == 202, made.text
    return str(made.json()["id"])


def submit_and_wait(app: LoopbackApp, **fields: str | None) -> str:
    job_id = submit(app, **fields)
    until(lambda: job(app, job_id)["state"] in FINISHED)
    return str(job(app, job_id)["state"])


def job(app: LoopbackApp, job_id: str) -> dict:
    return requests.get(app.url(f"/jobs/{job_id}"), timeout=30).json()


def jobs(app: LoopbackApp, **params: str) -> list[dict]:
    """Newest first."""
    return requests.get(app.url("/jobs"), params=params, timeout=30).json()


def state_of(app: LoopbackApp, model: str) -> str:
    models = requests.get(app.url("/model/status"), timeout=30).json()["models"]
    return str(next(m["state"] for m in models if m["id"] == model))


def until(condition: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.05)


class _AsBytesArrive:
    """A response read as its bytes arrive: the server served here sends a stream without
    chunks, which requests would otherwise read 512 bytes at a time."""

    def __init__(self, response: requests.Response) -> None:
        self.response = response

    def iter_lines(self, **kwargs: Any) -> Iterator[Any]:
        return self.response.iter_lines(chunk_size=1, **kwargs)


def read_events(response: requests.Response) -> Iterator[sse.Event]:
    return sse.read_events(_AsBytesArrive(response))  # type: ignore[arg-type]
