"""An upscale job from its stored input to the stored image, in process or on a Celery worker.

Its tiles are its steps: progress counts them, a cancel stops it before the next one, and the
record says what ran (upscaler, scale, source) beside the source's own parameters when the
source was generated here."""

import io
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from PIL import Image

from imagegen.generation.images import GenerationParameters, ImageRecord, ImageStore, png_bytes
from imagegen.generation.parameters import input_url
from imagegen.generation.render import Cancelled
from imagegen.generation.requests import GenerationRequest
from imagegen.generation.upscale_request import UpscaleParameters, UpscaleRequest
from imagegen.model.memory import memory_limit

if TYPE_CHECKING:
    from imagegen.model.upscalers.offered import OfferedUpscalers
    from imagegen.model.upscalers.upscaler import Upscaler

# UPSCALE_TILE_MEMORY=0 (auto): an upscale gets a tenth of the model weights in memory beside
# them, its picture's buffers and its tiles' activations together, so its peak stays within
# 1.1x of the resident models and the upscaler (docs/performance.md, "Upscaling"), within
# these bounds. With no model in memory, the room a model would take: an eighth of the limit.
AUTO_SHARE = 10
AUTO_TILE_MIN = 256 * 2**20
AUTO_TILE_MAX = 2 * 2**30


class UpscaleReport(Protocol):
    """The part of execution.Report an upscale uses."""

    def stop_requested(self) -> bool: ...

    def denoising(self, steps: int) -> None: ...

    def step(self, done: int, total: int) -> None: ...

    def phase(self, text: str) -> None: ...


@dataclass(frozen=True)
class Upscaling:
    """What runs upscales in this process (an upscale job, a hires fix's upscaler): the offered
    upscalers, UPSCALE_TILE_MEMORY, and the fp32 bytes of the models in memory now."""

    offered: "OfferedUpscalers"
    configured_bytes: int
    resident_bytes: Callable[[], int] = lambda: 0

    def budget(self, held_bytes: int = 0) -> int:
        """The tiles' budget in bytes for an upscale starting now whose picture's buffers take
        `held_bytes` (out of an automatic share only)."""
        return tile_budget(self.configured_bytes, self.resident_bytes(), held_bytes)


def tile_budget(configured: int, resident_bytes: int, held_bytes: int = 0) -> int:
    """UPSCALE_TILE_MEMORY, or with 0 a share: a tenth of `resident_bytes` within AUTO_TILE_MIN
    and AUTO_TILE_MAX (no model resident: an eighth of the memory limit, at most AUTO_TILE_MAX),
    less `held_bytes`, the picture's buffers, which the share covers as well (a 1024x1024
    picture at 4x holds 67 MiB), but never below AUTO_TILE_MIN (or the share, when smaller)."""
    if configured > 0:
        return configured
    if resident_bytes > 0:
        share = min(AUTO_TILE_MAX, max(AUTO_TILE_MIN, resident_bytes // AUTO_SHARE))
    else:
        limit = memory_limit()
        share = AUTO_TILE_MAX if limit is None else min(AUTO_TILE_MAX, limit // 8)
    return max(min(share, AUTO_TILE_MIN), share - held_bytes)


def held_bytes(upscalers: "list[Upscaler]", size: tuple[int, int], target: tuple[int, int]) -> int:
    """What the networks among `upscalers` hold for a `size` picture enlarged to `target`
    beside their tiles, added up (a second upscaler runs while the first's result is held)."""
    from imagegen.model.upscalers.upscaler import ModelUpscaler

    return sum(
        upscaler.picture_bytes(size, target)
        for upscaler in upscalers
        if isinstance(upscaler, ModelUpscaler)
    )


def tile_count(upscaler: "Upscaler", size: tuple[int, int], upscale: UpscaleRequest,
               budget_bytes: int) -> int:  # fmt: skip
    """The tiles the upscaler runs over all its passes (a filter: one step)."""
    from imagegen.model.upscalers.tiles import plan_tiles, tile_side
    from imagegen.model.upscalers.upscaler import ModelUpscaler

    if not isinstance(upscaler, ModelUpscaler):
        return 1
    total = 0
    for width, height in upscaler.passes(size, (upscale.width, upscale.height)):
        side = tile_side(budget_bytes=budget_bytes, width=width, height=height,
                         shape=upscaler.net.shape, margin=upscaler.margin)  # fmt: skip
        total += len(plan_tiles(width=width, height=height, side=side, margin=upscaler.margin))
    return total


def run_upscale(
    *,
    store: ImageStore,
    request: GenerationRequest,
    upscaling: Upscaling,
    report: UpscaleReport,
    key: str | None,
    queued_seconds: float,
) -> ImageRecord:
    """Reads the input, runs the upscaler tile by tile and stores the PNG and its record.
    Raises Cancelled when a cancel comes (checked before each tile)."""
    upscale = request.upscale
    assert upscale is not None, "an upscale job"
    upscalers = [upscaling.offered.find(upscale.upscaler)]
    if upscale.upscaler_2 is not None and upscale.upscaler_2_visibility > 0:
        upscalers.append(upscaling.offered.find(upscale.upscaler_2))
    source = Image.open(io.BytesIO(store.read_input(upscale.source)))
    source.load()
    budget = upscaling.budget(held_bytes(upscalers, source.size, (upscale.width, upscale.height)))
    counts = [tile_count(u, source.size, upscale, budget) for u in upscalers]
    tiles = sum(counts)
    report.denoising(tiles)
    report.phase("upscaling")

    def check() -> None:
        if report.stop_requested():
            raise Cancelled()

    started = time.monotonic()
    results = []
    for upscaler, before in zip(upscalers, (0, counts[0]), strict=False):

        def progress(done: int, _total: int, before: int = before) -> None:
            report.step(before + done, tiles)

        results.append(
            upscaler.upscale(
                source, scale=upscale.scale, budget_bytes=budget, check=check,
                progress=progress,
            )
        )  # fmt: skip
    result = results[0]
    if len(results) > 1:  # A1111's upscaler_2: blended over the first's at its visibility
        result = Image.blend(result, results[1], upscale.upscaler_2_visibility)
    if result.size != (upscale.width, upscale.height):  # a size asked: the centre kept
        result = centre_crop(result, (upscale.width, upscale.height))
    upscale_seconds = time.monotonic() - started
    report.phase("saving")
    parameters = record_parameters(store, upscale, upscalers[0].scale, tiles)
    encoding = time.monotonic()
    png = png_bytes(result, parameters)
    timings = {
        "queued_seconds": queued_seconds,
        "upscale_seconds": upscale_seconds,
        "png_seconds": time.monotonic() - encoding,
    }
    return store.save(png, parameters, device="cpu", timings=timings, key=key)


def centre_crop(image: Image.Image, size: tuple[int, int]) -> Image.Image:
    """The centre `size` of an image at least that large, as A1111's extras crop."""
    left, top = (image.width - size[0]) // 2, (image.height - size[1]) // 2
    return image.crop((left, top, left + size[0], top + size[1]))


def record_parameters(
    store: ImageStore, upscale: UpscaleRequest, network_scale: int | None, tiles: int
) -> GenerationParameters:
    """The source's generation parameters at the result's size when it was generated here
    (and is still stored), else empty prompt fields; `upscale` says what ran."""
    ran = UpscaleParameters(
        upscaler=upscale.upscaler, scale=upscale.scale, upscaler_scale=network_scale,
        source_sha256=upscale.source, source_url=input_url(upscale.source),
        source_image=upscale.source_image, source_width=upscale.source_width,
        source_height=upscale.source_height, tiles=tiles,
        upscaler_2=upscale.upscaler_2 if upscale.upscaler_2_visibility > 0 else None,
        upscaler_2_visibility=upscale.upscaler_2_visibility if upscale.upscaler_2 else 0.0,
    )  # fmt: skip
    found = None if upscale.source_image is None else store.get(upscale.source_image)
    if found is not None:
        update = {"width": upscale.width, "height": upscale.height, "edit": None, "upscale": ran}
        return found.parameters.model_copy(update=update)
    return GenerationParameters(
        prompt="", negative_prompt=None, steps=0, guidance=0.0, seed=0, scheduler="",
        model_id="", revision=None, upscale=ran, width=upscale.width, height=upscale.height,
    )  # fmt: skip
