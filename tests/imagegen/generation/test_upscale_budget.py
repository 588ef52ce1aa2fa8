"""The automatic tile budget (UPSCALE_TILE_MEMORY=0) is a share of the resident models that
covers an upscale's picture buffers as well as its tiles: the bigger the picture, the less
is left for the tiles, so the peak stays within the share (docs/performance.md,
"Upscaling"). A configured budget stays the tiles' own.

The job's tile count is read before any tile runs: its report asks to stop at once, so the
upscale ends at the first tile's check and no network runs."""

import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from imagegen.generation.images import ImageStore
from imagegen.generation.render import Cancelled
from imagegen.generation.requests import GenerationRequest
from imagegen.generation.upscale import (
    AUTO_SHARE,
    AUTO_TILE_MIN,
    Upscaling,
    held_bytes,
    run_upscale,
    tile_budget,
    tile_count,
)
from imagegen.generation.upscale_request import UpscaleRequest
from imagegen.model.upscalers.offered import OfferedUpscalers, parse_upscalers
from imagegen.model.upscalers.tiles import bytes_per_pixel
from imagegen.model.upscalers.upscaler import LANCZOS, ModelUpscaler
from tests.support.local_hub import LocalHub
from tests.support.tiny_upscaler import ESRGAN_REPO, X4, place_on_hub, tiny_net

MIB, GIB = 2**20, 2**30
SIDE = 340  # one tile whole needs 268 MiB for the tiny x4 network: above AUTO_TILE_MIN


@pytest.fixture(scope="module")
def offered(hub_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OfferedUpscalers]:
    place_on_hub(hub_root)
    work = tmp_path_factory.mktemp("upscale-budget")
    (work / "share").mkdir()
    with LocalHub(hub_root) as hub:
        upscalers = OfferedUpscalers(
            parse_upscalers(f"{ESRGAN_REPO}:tiny-x4.pth"), model_dir=work / "share",
            cache_dir=work / "cache", endpoint=hub.url,
        )  # fmt: skip
        upscalers.pull()
        yield upscalers


class StopAtOnce:
    """A job's report that asks to stop before the first tile and keeps the step count."""

    def __init__(self) -> None:
        self.steps: int | None = None

    def stop_requested(self) -> bool:
        return True

    def denoising(self, steps: int) -> None:
        self.steps = steps

    def step(self, done: int, total: int) -> None:
        raise AssertionError("no tile should run")

    def phase(self, text: str) -> None:
        pass


def test_a_4x_pass_holds_19_bytes_an_input_pixel_and_3_an_output_pixel():
    upscaler = ModelUpscaler("x4", tiny_net(X4))
    at_1024 = held_bytes([upscaler], (1024, 1024), (4096, 4096))
    assert at_1024 == 19 * MIB + 3 * 16 * MIB  # 67 MiB: the source 3 ways, the output once
    assert held_bytes([upscaler], (512, 512), (2048, 2048)) * 4 == at_1024
    # Asked for 8x it runs twice: the larger pass's buffers count.
    assert held_bytes([upscaler], (256, 256), (2048, 2048)) == at_1024
    # A filter holds no tiles beside its picture; a second network counts as well.
    assert held_bytes([LANCZOS], (1024, 1024), (4096, 4096)) == 0
    assert held_bytes([upscaler, upscaler], (1024, 1024), (4096, 4096)) == 2 * at_1024


def test_the_automatic_share_leaves_the_tiles_what_the_picture_does_not_hold():
    sd15 = 4 * GIB  # about SD 1.5's fp32 weights: a 410 MiB share
    share = sd15 // AUTO_SHARE
    assert tile_budget(0, sd15) == share
    assert tile_budget(0, sd15, 67 * MIB) == share - 67 * MIB
    assert tile_budget(0, 40 * GIB, 67 * MIB) == 2 * GIB - 67 * MIB  # at the cap, less too
    # Never below the floor (a picture too big for the share still gets a working tile) ...
    assert tile_budget(0, sd15, share) == AUTO_TILE_MIN
    # ... and a configured budget is the tiles' alone, whatever the picture.
    assert tile_budget(12345, sd15, 67 * MIB) == 12345
    assert Upscaling(None, 0, lambda: sd15).budget(67 * MIB) == share - 67 * MIB  # type: ignore[arg-type]


def test_an_upscale_job_sizes_its_tiles_by_the_share_less_its_picture(
    offered: OfferedUpscalers, tmp_path: Path
):
    """A share just above what the 340x340 picture needs in one tile: with the picture's
    buffers taken out of it first, the job cuts 2 x 2 tiles."""
    net = offered.find("tiny-x4")
    assert isinstance(net, ModelUpscaler)
    whole = bytes_per_pixel(X4) * SIDE * SIDE
    held = held_bytes([net], (SIDE, SIDE), (4 * SIDE, 4 * SIDE))
    share = whole + held // 2
    assert share > AUTO_TILE_MIN and held == 67 * SIDE * SIDE
    store = ImageStore(tmp_path / "images")
    pixels = np.random.default_rng(3).integers(0, 256, (SIDE, SIDE, 3), dtype=np.uint8)
    source = store.save_input(png_of(Image.fromarray(pixels)))
    upscale = UpscaleRequest(
        source=source, upscaler="tiny-x4", scale=4, width=4 * SIDE, height=4 * SIDE,
        source_width=SIDE, source_height=SIDE, network_pixels=SIDE * SIDE,
    )  # fmt: skip
    report = StopAtOnce()
    with pytest.raises(Cancelled):
        run_upscale(
            store=store, request=GenerationRequest(prompt="", upscale=upscale),
            upscaling=Upscaling(offered, 0, lambda: share * AUTO_SHARE), report=report,
            key=None, queued_seconds=0.0,
        )  # fmt: skip
    assert report.steps == 4
    # The share alone would have run the picture whole.
    assert tile_count(net, (SIDE, SIDE), upscale, share) == 1


def png_of(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()
