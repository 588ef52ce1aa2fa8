"""A cancel takes effect within a block of the UNet or a tile of the VAE's decode, not at the
step's end, in both job modes, on the tiny pipeline in this process: the in-process JobQueue,
and distributed mode's job store on a real redis-server with the worker's runtime (its
heartbeat included) on a thread, taking each job as a Celery message would make it.

A step is made slow on purpose: every resnet of the UNet (eight a step) sleeps a second at
its start, so a step takes eight seconds and a cancel that waited for the step's end would
take six or more; the decode is made slow the same way, a second per tile (nine tiles). Each
cancel is sent early in the step (or the decode), and must end the job within one slow part
plus two seconds. The job behind it then runs on the same pipeline and makes the same image,
byte for byte, as the same request made before: the stop left nothing half-done behind."""

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from django.test import override_settings

from imagegen import backend
from imagegen.errors import JobFinished
from imagegen.generation.images import ImageStore
from imagegen.generation.job_board import FINISHED, JobState, JobView
from imagegen.generation.jobs import JobQueue
from imagegen.generation.parameters import resolve
from imagegen.generation.render import Cancelled, render
from imagegen.generation.requests import GenerationRequest
from imagegen.generation.stop_points import stop_points, stoppable_modules
from imagegen.model.loader import ModelLoader
from imagegen.model.pipeline import LoadOptions, load_pipeline
from tests.support.distributed import RedisServer
from tests.support.loaders import new_loader, wait_for
from tests.support.local_hub import LocalHub
from tests.support.model_service import SD_REPO, SDXL_REPO
from tests.support.solo_worker import solo_worker
from tests.support.tiny_adapters import TAESD_REPO, build_adapter_repos

SLOW = 1.0  # seconds each slow part sleeps
BOUND = SLOW + 2  # the promise: within one block or tile, plus two seconds
# 64x64 in tiles of 32 pixels: nine tiles (tests/imagegen/model/test_vae_tiles.py).
REQUEST = GenerationRequest(prompt="a slow harbour", steps=3, guidance=5.0, seed=5, size=(64, 64))


@pytest.fixture(scope="module")
def loader(hub_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelLoader]:
    """One pulled tiny pipeline for the module, its full VAE decoding in tiles of 32 pixels."""
    work = tmp_path_factory.mktemp("cancel")
    share = work / "share"
    share.mkdir()
    with LocalHub(hub_root) as hub:
        loaded = new_loader(hub, share, work / "cache", options=LoadOptions(vae_tile=32))
        assert loaded.pull()
        assert wait_for(loaded, {"ready", "failed"}) == "ready", loaded.status()
    yield loaded


@dataclass
class Mode:
    """One job mode, through the calls its web side makes (submit, cancel, wait)."""

    send: Callable[[GenerationRequest], str]  # its submit: the job's id
    cancel: Callable[[str], object]
    wait: Callable[[str, float], JobView | None]
    images: Path
    submitted: list[str] = field(default_factory=list)

    def submit(self, request: GenerationRequest) -> str:
        self.submitted.append(self.send(request))
        return self.submitted[-1]

    def settle(self) -> None:
        """Leaves no job unfinished, so no job of one test runs on the shared pipeline while
        the next test's does (after a failed test, say)."""
        for job_id in self.submitted:
            with contextlib.suppress(JobFinished):
                self.cancel(job_id)
            finished_view(self, job_id, 60)


@contextlib.contextmanager
def in_process(loader: ModelLoader, images: Path) -> Iterator[Mode]:
    # The rules of a process configured with this model (no default LoRA, so no preset).
    with override_settings(MODEL_ID=loader.source.model_id, MODEL_ADAPTERS=(), GEN_DEFAULT_STEPS=2):
        rules = backend.rules_from_settings()
    jobs = JobQueue(loader, ImageStore(images), queue_max=4, load_timeout=60, keep=20, rules=rules)
    mode = Mode(lambda r: jobs.submit(r).id, jobs.cancel, jobs.wait, images)
    try:
        yield mode
    finally:
        mode.settle()


@contextlib.contextmanager
def distributed(loader: ModelLoader, images: Path, server: RedisServer) -> Iterator[Mode]:
    with solo_worker(loader, images, server) as solo:
        mode = Mode(solo.submit, solo.board.cancel, solo.board.wait, images)
        try:
            yield mode
        finally:
            mode.settle()


@pytest.fixture(params=["in-process", "distributed"])
def mode(request: pytest.FixtureRequest, loader: ModelLoader, tmp_path: Path) -> Iterator[Mode]:
    if request.param == "in-process":
        with in_process(loader, tmp_path / "images") as mode:
            yield mode
    else:
        server = request.getfixturevalue("redis_server")
        with distributed(loader, tmp_path / "images", server) as mode:
            yield mode


class SlowParts:
    """Makes each of `modules` sleep SLOW seconds at its start while `on` is set, and counts
    the calls (a leaf inside a stoppable part, so the sleep is within that part)."""

    def __init__(self, modules: list[torch.nn.Module]) -> None:
        self.on = threading.Event()
        self.calls = 0
        self.reached = threading.Condition()
        self.handles = [m.register_forward_pre_hook(self._sleep) for m in modules]

    def _sleep(self, *_: object) -> None:
        if self.on.is_set():
            with self.reached:
                self.calls += 1
                self.reached.notify_all()
            time.sleep(SLOW)

    def wait_calls(self, count: int, timeout: float = 30) -> None:
        with self.reached:
            assert self.reached.wait_for(lambda: self.calls >= count, timeout), self.calls

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def unet_resnets(pipe) -> list[torch.nn.Module]:
    """Every resnet's first convolution: eight calls a step on the tiny UNet."""
    return [m.conv1 for m in pipe.unet.modules() if type(m).__name__ == "ResnetBlock2D"]


def decoder_tiles(pipe) -> list[torch.nn.Module]:
    """The decoder's first convolution: one call per tile."""
    return [pipe.vae.decoder.conv_in]


def finished_view(mode: Mode, job_id: str, timeout: float) -> JobView:
    view = mode.wait(job_id, timeout)
    assert view is not None and view.state in FINISHED, view
    return view


@pytest.fixture(scope="module")
def first_png(loader: ModelLoader, tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The request's image, made on the module's pipeline before any job was stopped."""
    with in_process(loader, tmp_path_factory.mktemp("first")) as mode:
        view = finished_view(mode, mode.submit(REQUEST), 60)
    assert view.state is JobState.SUCCEEDED and view.image is not None, view
    return (mode.images / f"{view.image.id}.png").read_bytes()


def cancel_mid_run(mode: Mode, loader: ModelLoader, first_png: bytes, slow_parts) -> None:
    """Runs a job with `slow_parts` slow and cancels it once two slow calls have begun (its
    step, or its decode, then has most of its time left); checks that it stopped within
    BOUND with nothing kept, and that the job queued behind it made the first image."""
    slow = SlowParts(slow_parts(loader.pipeline(60)))
    try:
        slow.on.set()
        stopped = mode.submit(REQUEST.model_copy(update={"seed": 6}))
        behind = mode.submit(REQUEST)  # waits behind it, as the blocked queue did
        slow.wait_calls(2)
        asked = time.monotonic()
        mode.cancel(stopped)
        view = finished_view(mode, stopped, 30)
        took = time.monotonic() - asked
        slow.on.clear()
    finally:
        slow.remove()
    assert took < BOUND, f"cancelled after {took:.1f} s"
    assert (view.state, view.phase) == (JobState.CANCELLED, "cancelled while running")
    assert view.image is None
    after = finished_view(mode, behind, 60)
    assert after.state is JobState.SUCCEEDED and after.image is not None
    # Nothing of the stopped job was written; the next image is the first one, byte for byte.
    assert sorted(p.name for p in mode.images.iterdir()) == [
        f"{after.image.id}.json",
        f"{after.image.id}.png",
    ]
    assert (mode.images / f"{after.image.id}.png").read_bytes() == first_png


def test_a_cancel_mid_step_ends_the_job_within_a_block(mode, loader, first_png):
    cancel_mid_run(mode, loader, first_png, unet_resnets)  # at 2 of the first step's 8


def test_a_cancel_mid_decode_ends_the_job_within_a_tile(mode, loader, first_png):
    cancel_mid_run(mode, loader, first_png, decoder_tiles)  # at 2 of the 9 tiles


def render_stopping(pipe, stop_requested: Callable[[], bool], on_step=lambda *_: None):
    parameters = resolve(pipe, REQUEST, model_id=SD_REPO, revision=None)
    return render(pipe, parameters, scheduler=None, device="cpu", home="cpu", on_step=on_step,
                  stop_requested=stop_requested)  # fmt: skip


def test_stop_points_are_registered_once_and_do_nothing_between_jobs(loader):
    pipe = loader.pipeline(60)
    assert render_stopping(pipe, lambda: False).image.size == (64, 64)
    with pytest.raises(Cancelled):
        render_stopping(pipe, lambda: True)  # stopped at the first block
    points = stop_points(pipe)
    assert set(points.modules) == set(stoppable_modules(pipe))
    for module in points.modules:
        assert len(module._forward_pre_hooks) == 1, module  # one hook, however many runs
    # No generation runs: no stop point asks the stopped run's check, which still says stop.
    image = pipe("direct", num_inference_steps=1, height=64, width=64).images[0]
    assert image.size == (64, 64)


@pytest.fixture
def tiny_decoder_pipe(hub_root: Path):
    build_adapter_repos(hub_root, sd_repo=SD_REPO, sdxl_repo=SDXL_REPO)
    return load_pipeline(
        hub_root / SD_REPO, variant="fp16", device="cpu", tiny_decoder=hub_root / TAESD_REPO
    )


@pytest.mark.parametrize("decoder", ["full", "tiny"])
def test_either_decoder_stops_at_its_parts_after_the_last_step(decoder, loader, request):
    """A stop asked once the last step ended (no step end left to see it) stops the decode."""
    pipe = (
        loader.pipeline(60) if decoder == "full" else request.getfixturevalue("tiny_decoder_pipe")
    )
    decoding = threading.Event()

    def on_step(done: int, total: int) -> None:
        if done == total:
            decoding.set()

    with pytest.raises(Cancelled):
        render_stopping(pipe, decoding.is_set, on_step)
    assert decoding.is_set()
