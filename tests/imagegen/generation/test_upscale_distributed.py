"""An upscale job in distributed mode with a network: the job store on a real redis-server and
the worker's runtime (as `manage.py run_worker` makes it, heartbeat included) on a thread,
taking each job as a Celery message would make it (tests/support/solo_worker.py), its
UPSCALERS a tiny random x4 ESRGAN pulled from the test hub. The tiles are the job's steps in
the shared store, and a cancel stops the run before the next tile.

The session's shared stack runs the filters through a real Celery worker
(tests/imagegen/api/test_upscale_stack.py); its worker has no UPSCALERS, so a network's tiles
are held here."""

import io
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from imagegen.generation.images import ImageStore
from imagegen.generation.job_board import FINISHED, JobState
from imagegen.generation.requests import GenerationRequest
from imagegen.generation.upscale import Upscaling
from imagegen.generation.upscale_request import UpscaleRequest
from imagegen.model.upscalers.offered import OfferedUpscalers, parse_upscalers
from imagegen.model.upscalers.tiles import bytes_per_pixel
from tests.support.distributed import RedisServer
from tests.support.loaders import new_loader
from tests.support.local_hub import LocalHub
from tests.support.solo_worker import SoloWorker, solo_worker
from tests.support.tiny_upscaler import ESRGAN_REPO, X4, place_on_hub

TILE_BUDGET = bytes_per_pixel(X4) * 64 * 64  # tiles of 32 input pixels
SLOW = 0.3  # seconds each tile sleeps in the cancel test


@pytest.fixture(scope="module")
def solo(
    hub_root: Path, tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer
) -> Iterator[tuple[SoloWorker, OfferedUpscalers, Path]]:
    place_on_hub(hub_root)
    work = tmp_path_factory.mktemp("upscale-distributed")
    share = work / "share"
    share.mkdir()
    with LocalHub(hub_root) as hub:
        offered = OfferedUpscalers(
            parse_upscalers(f"{ESRGAN_REPO}:tiny-x4.pth"), model_dir=share,
            cache_dir=work / "cache", endpoint=hub.url,
        )  # fmt: skip
        offered.pull()
        loader = new_loader(hub, share, work / "cache")  # the worker's model: never loaded
        with solo_worker(loader, work / "images", redis_server) as worker:
            worker.runtime.upscaling = Upscaling(offered, TILE_BUDGET)
            yield worker, offered, work / "images"


def upscale_job(images: Path, size: tuple[int, int]) -> GenerationRequest:
    pixels = np.random.default_rng(1).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    source = ImageStore(images).save_input(buffer.getvalue())
    upscale = UpscaleRequest(
        source=source, upscaler="tiny-x4", scale=4, width=size[0] * 4, height=size[1] * 4,
        source_width=size[0], source_height=size[1], network_pixels=size[0] * size[1],
    )  # fmt: skip
    return GenerationRequest(prompt="", upscale=upscale)


def test_the_worker_runs_the_tiles_as_steps_and_stores_the_record(solo):
    worker, _, images = solo
    job_id = worker.submit(upscale_job(images, (100, 48)))
    view = worker.board.wait(job_id, 120)
    assert view is not None and view.state is JobState.SUCCEEDED, view
    assert view.progress.step == view.progress.steps == 8  # 100x48 in 32-pixel tiles
    assert view.image is not None
    ran = view.image.parameters.upscale
    assert ran is not None and (ran.upscaler, ran.upscaler_scale, ran.tiles) == ("tiny-x4", 4, 8)
    made = Image.open(ImageStore(images).png_path(view.image.id))
    assert made.size == (400, 192)


def test_a_cancel_stops_the_worker_before_the_next_tile(solo):
    worker, offered, images = solo
    net = offered.find("tiny-x4").net  # type: ignore[attr-defined]
    hook = net.register_forward_pre_hook(lambda *_: time.sleep(SLOW))
    try:
        job_id = worker.submit(upscale_job(images, (128, 128)))  # 16 tiles
        deadline = time.monotonic() + 60
        while (view := worker.board.lookup(job_id)) is None or view.progress.step < 2:
            assert time.monotonic() < deadline, view
            time.sleep(0.02)
        assert view.phase == "upscaling" and view.progress.steps == 16
        worker.board.cancel(job_id)
        cancelled_at = time.monotonic()
        while (view := worker.board.lookup(job_id)) is not None and view.state not in FINISHED:
            assert time.monotonic() - cancelled_at < 10 * SLOW + 5, view
            time.sleep(0.02)
        assert view is not None and view.state is JobState.CANCELLED, view
        assert view.progress.step < 16 and view.image is None
    finally:
        hook.remove()
