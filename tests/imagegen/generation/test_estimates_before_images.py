"""An estimate from the first request after the model's load: its work counted and the pace
measured in that load, before it is ready, never beside a generation
(imagegen/generation/work.py), then the measured timings once an image is made; and a
job whose synchronous client gave up stops within the cancel bound even while the model
loads. Both job modes in process: the JobQueue, and distributed mode's board and worker
runtime on a real redis-server (tests/support/solo_worker.py). The tiny pipeline throughout;
a slow load is a real load held back until the test lets it go."""

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.test import Client, override_settings

from imagegen import backend
from imagegen.errors import JobFinished
from imagegen.generation import work as work_module
from imagegen.generation.estimates import Estimate
from imagegen.generation.job_board import FINISHED, JobState, JobView
from imagegen.generation.requests import GenerationRequest
from imagegen.generation.work import count_work, measure_throughput
from imagegen.model import loader as loader_module
from imagegen.model.loader import ModelLoader
from tests.support.loaders import new_loader, serve, wait_for
from tests.support.local_hub import LocalHub
from tests.support.solo_worker import solo_worker

PACE = 1e9  # GEN_THROUGHPUT of these tests, FLOP/s: the counted figures are known exactly
SLOW_PACE = 1e6  # so slow that the tiny model's 64x64 image counts past any timeout here
BOUND = 3.0  # the cancel bound (imagegen/generation/stop_points.py), with margin
REQUEST = GenerationRequest(prompt="p", steps=4, guidance=5.0, size=(64, 64), seed=1)


@pytest.fixture(scope="module")
def pulled(hub_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A share with the tiny model on it, pulled once; every test's loader is a fresh
    process's on it (not_started), as after a restart."""
    work = tmp_path_factory.mktemp("pulled")
    share = work / "share"
    share.mkdir()
    with LocalHub(hub_root) as hub:
        first = new_loader(hub, share, work / "cache")
        assert first.pull()
        assert wait_for(first, {"ready", "failed"}) == "ready", first.status()
        yield share


@pytest.fixture
def fresh(hub, pulled: Path, tmp_path: Path) -> ModelLoader:
    """A new process's loader on the pulled share: the model not loaded yet."""
    loader = new_loader(hub, pulled, tmp_path / "cache")
    assert loader.status().state == "not_started"
    return loader


@pytest.fixture
def held_load(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Holds every model load of the test back until the event is set (at the end at the
    latest): a load that takes as long as the test needs."""
    release = threading.Event()
    real = loader_module.load_pipeline

    def slow_load(*args, **kwargs):
        release.wait(120)
        return real(*args, **kwargs)

    monkeypatch.setattr(loader_module, "load_pipeline", slow_load)
    yield release
    release.set()


@dataclass
class Mode:
    """One job mode, through the calls its web side makes."""

    submit: Callable[[GenerationRequest], str]
    cancel: Callable[[str], object]
    wait: Callable[[str, float | None], JobView | None]
    estimate: Callable[[GenerationRequest], Estimate | None]


@contextlib.contextmanager
def in_mode(
    name: str, loader: ModelLoader, tmp_path: Path, monkeypatch, request, throughput: float
) -> Iterator[Mode]:
    submitted: list[str] = []
    if name == "in-process":
        queue = serve(loader, tmp_path / "images", monkeypatch, throughput=throughput)
        mode = Mode(lambda r: queue.submit(r).id, queue.cancel, queue.wait, queue.estimate)
        context: contextlib.AbstractContextManager = contextlib.nullcontext()
    else:
        server = request.getfixturevalue("redis_server")
        with override_settings(MODEL_ID=loader.source.model_id, MODEL_ADAPTERS=()):
            rules = backend.rules_from_settings()
        context = solo_worker(
            loader, tmp_path / "images", server, throughput=throughput, rules=rules
        )
    with context as solo:
        if solo is not None:
            mode = Mode(solo.submit, solo.board.cancel, solo.board.wait, solo.board.estimate)
        original = mode.submit

        def submit(r: GenerationRequest) -> str:
            submitted.append(original(r))
            return submitted[-1]

        mode.submit = submit
        try:
            yield mode
        finally:
            for job_id in submitted:  # none left running into the next test
                with contextlib.suppress(JobFinished):
                    mode.cancel(job_id)


def until(found: Callable[[], object], timeout: float = 60) -> object:
    deadline = time.monotonic() + timeout
    while not (value := found()):
        assert time.monotonic() < deadline, "not in time"
        time.sleep(0.05)
    return value


@pytest.mark.parametrize("mode_name", ["in-process", "distributed"])
def test_the_first_request_after_the_load_is_estimated_from_the_models_counted_work(
    mode_name, fresh, tmp_path, monkeypatch, request
):
    """Nothing measured yet: before the load no estimate (nothing counted); once loaded, the
    counted work over GEN_THROUGHPUT (distributed: the worker counts and publishes it at its
    load); once an image is made, its measured timings."""
    work = count_work(fresh.source.path, tiny_decoder=None, tile=0)
    assert work.size == (64, 64) and work.unet_call > 0 and work.decode > 0
    with in_mode(mode_name, fresh, tmp_path, monkeypatch, request, PACE) as mode:
        time.sleep(1)  # a worker's first beats: nothing counted while nothing loads
        assert mode.estimate(REQUEST) is None
        assert fresh.pull()
        assert wait_for(fresh, {"ready", "failed"}) == "ready"
        found = until(lambda: mode.estimate(REQUEST))
        assert found.counted and found.basis == (64, 64)
        # 4 steps, each a UNet call of a batch of two (guidance 5), the prompt, the decode.
        counted = (work.text + 4 * 2 * work.unet_call + work.decode) / PACE
        assert found.seconds == pytest.approx(counted)

        job = mode.submit(REQUEST.model_copy(update={"steps": 2}))
        view = mode.wait(job, 120)
        assert view is not None and view.state is JobState.SUCCEEDED, view
        measured = until(lambda: (e := mode.estimate(REQUEST)) and not e.counted and e)
        assert measured.basis == (64, 64) and measured.seconds != found.seconds


@pytest.mark.parametrize("mode_name", ["in-process", "distributed"])
def test_the_count_runs_in_the_load_before_it_is_ready(
    mode_name, fresh, held_load, tmp_path, monkeypatch, request
):
    """In the loading thread, the state still `loading`: never beside a job. An estimate
    asked during the load waits for nothing and has no counted figure."""
    seen = counted_in(monkeypatch)
    with in_mode(mode_name, fresh, tmp_path, monkeypatch, request, PACE) as mode:
        assert fresh.pull()
        until(lambda: fresh.status().state == "loading")
        started = time.monotonic()
        assert mode.estimate(REQUEST) is None
        assert time.monotonic() - started < 5
        held_load.set()
        assert wait_for(fresh, {"ready", "failed"}) == "ready"
        assert seen == [("loading", "model-pull")]
        found = until(lambda: mode.estimate(REQUEST))
        assert found.counted


@pytest.mark.parametrize("mode_name", ["in-process", "distributed"])
def test_a_job_starts_no_count(mode_name, fresh, tmp_path, monkeypatch, request):
    """A model loaded before this queue or worker was made: its jobs, and a worker's beats
    while one runs, count nothing (the count is the load's alone)."""
    assert fresh.pull()
    assert wait_for(fresh, {"ready", "failed"}) == "ready"
    seen = counted_in(monkeypatch)
    with in_mode(mode_name, fresh, tmp_path, monkeypatch, request, PACE) as mode:
        assert mode.estimate(REQUEST) is None
        job = mode.submit(REQUEST.model_copy(update={"steps": 2}))
        view = mode.wait(job, 120)
        assert view is not None and view.state is JobState.SUCCEEDED, view
        time.sleep(1)  # a worker's beats after it
        assert seen == []
        assert not until(lambda: mode.estimate(REQUEST)).counted


def counted_in(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """The model's state and the thread at each count of its work from now on."""
    seen: list[tuple[str, str]] = []
    real = work_module.count_model

    def count_model(loader, throughput):
        seen.append((loader.status().state, threading.current_thread().name))
        return real(loader, throughput)

    monkeypatch.setattr(work_module, "count_model", count_model)
    return seen


def test_the_pace_is_measured_on_the_device_in_about_a_second():
    started = time.monotonic()
    pace = measure_throughput("cpu", seconds=0.3)
    assert time.monotonic() - started < 10  # one warm-up call, then 0.3 s of calls
    assert 1e8 < pace < 1e14, pace  # FLOP/s of any CPU


def test_a_synchronous_request_that_cannot_finish_is_refused_at_once_after_a_pull(
    fresh, tmp_path, monkeypatch
):
    """The very first request once a pull has loaded the model, nothing made yet: refused
    at once with its counted estimate, nothing queued."""
    queue = serve(fresh, tmp_path / "images", monkeypatch, throughput=SLOW_PACE)
    client = Client()
    assert client.post("/model/pull").status_code in (200, 202)
    assert wait_for(fresh, {"ready", "failed"}) == "ready"
    with override_settings(GEN_SYNC_TIMEOUT=10):
        started = time.monotonic()
        native = client.post("/generate", {"prompt": "first", "size": "64x64", "steps": "2"})
        openai = client.post(
            "/v1/images/generations", {"prompt": "first", "size": "64x64", "steps": 2},
            content_type="application/json",
        )  # fmt: skip
        took = time.monotonic() - started
    assert native.status_code == 400, native.content
    message = native.json()["error"]["message"]
    assert message.startswith("This request would take about ")
    assert "2 steps at 64x64" in message and "counted over this machine's pace" in message
    assert openai.status_code == 400 and openai.json()["error"]["message"] == message
    assert took < 8  # at once, not the 10 s of a 504
    assert queue.recent(10) == []


def finished(mode: Mode, job_id: str, timeout: float) -> JobView:
    view = mode.wait(job_id, timeout)
    assert view is not None and view.state in FINISHED, view
    return view


@pytest.mark.parametrize("mode_name", ["in-process", "distributed"])
def test_a_job_cancelled_while_the_model_loads_stops_within_the_bound(
    mode_name, fresh, held_load, tmp_path, monkeypatch, request
):
    """The job waits for a load that goes on: its cancel ends it at once, not when the load
    ends; the load goes on and the next job runs on it."""
    with in_mode(mode_name, fresh, tmp_path, monkeypatch, request, PACE) as mode:
        stopped = mode.submit(REQUEST)
        until(lambda: fresh.status().state == "loading")
        time.sleep(0.5)  # the job waits for the load
        asked = time.monotonic()
        mode.cancel(stopped)
        view = finished(mode, stopped, 30)
        took = time.monotonic() - asked
        assert took < BOUND, f"stopped {took:.1f} s after the cancel"
        assert view.state is JobState.CANCELLED, view
        assert fresh.status().state == "loading"  # the load was not stopped
        behind = mode.submit(REQUEST)
        held_load.set()
        after = finished(mode, behind, 120)
        assert after.state is JobState.SUCCEEDED, after


def test_a_synchronous_request_that_times_out_cancels_its_job_within_the_bound(
    fresh, held_load, tmp_path, monkeypatch
):
    """GEN_SYNC_TIMEOUT runs out while the model loads: a 504, and the job it cancelled stops
    within the cancel bound after it, the load still going on."""
    queue = serve(fresh, tmp_path / "images", monkeypatch, throughput=PACE)
    with override_settings(GEN_SYNC_TIMEOUT=2):
        started = time.monotonic()
        answer = Client().post("/generate", {"prompt": "timed out", "size": "64x64"})
        took = time.monotonic() - started
    assert answer.status_code == 504, answer.content
    assert took < 2 + BOUND
    (job,) = queue.recent(10)
    view = queue.wait(job.id, BOUND)
    assert view is not None and view.state is JobState.CANCELLED, view
    assert fresh.status().state == "loading"


def test_an_edits_encode_of_its_input_stops_within_it(fresh):
    """The VAE's encode of an edit's input (4.9 TFLOP for SDXL at 1024x1024, a minute on a
    CPU) has stop points too: a cancel asked in it ends the job there, before any UNet call."""
    from PIL import Image

    from imagegen.generation.edit_inputs import EditInputs
    from imagegen.generation.parameters import resolve
    from imagegen.generation.render import Cancelled, render

    pipe = fresh.pipeline(120)
    parameters = resolve(pipe, REQUEST, model_id=fresh.source.model_id, revision=None)
    edit = EditInputs(image=Image.new("RGB", (64, 64), "gray"), mask=None, strength=1.0,
                      mask_blur=4)  # fmt: skip
    encoding, unet_calls = threading.Event(), []
    hooks = [
        pipe.vae.encoder.conv_in.register_forward_pre_hook(lambda *_: encoding.set()),
        pipe.unet.register_forward_pre_hook(lambda *_: unet_calls.append(1)),
    ]
    try:
        with pytest.raises(Cancelled):
            render(pipe, parameters, scheduler=None, device="cpu", home="cpu",
                   on_step=lambda *_: None, stop_requested=encoding.is_set, edit=edit)  # fmt: skip
    finally:
        for hook in hooks:
            hook.remove()
    assert encoding.is_set() and unet_calls == []
