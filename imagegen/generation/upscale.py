"""An upscale job from its stored input to the stored image, in process or on a Celery worker.

Its tiles are its steps: progress counts them, a cancel stops it before the next one, and the
record says what ran (upscaler, scale, source) beside the source's own parameters when the
source was generated here."""

import io
import time
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

# UPSCALE_TILE_MEMORY=0 (auto): a tile's activations get this much at most, and never more than
# an AUTO_SHARE of the memory limit, so an upscale beside a resident model stays within a little
# of the model's own size.
AUTO_TILE_BYTES = 2 * 2**30
AUTO_SHARE = 8


class UpscaleReport(Protocol):
    """The part of execution.Report an upscale uses."""

    def stop_requested(self) -> bool: ...

    def denoising(self, steps: int) -> None: ...

    def step(self, done: int, total: int) -> None: ...

    def phase(self, text: str) -> None: ...


@dataclass(frozen=True)
class Upscaling:
    """What runs an upscale job in this process: the offered upscalers and the tiles' memory
    budget in bytes."""

    offered: "OfferedUpscalers"
    budget_bytes: int


def tile_budget(configured: int) -> int:
    """UPSCALE_TILE_MEMORY, or with 0 the smaller of AUTO_TILE_BYTES and an AUTO_SHARE of the
    memory limit (imagegen.model.memory.memory_limit)."""
    if configured > 0:
        return configured
    limit = memory_limit()
    return AUTO_TILE_BYTES if limit is None else min(AUTO_TILE_BYTES, limit // AUTO_SHARE)


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
    counts = [tile_count(u, source.size, upscale, upscaling.budget_bytes) for u in upscalers]
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
                source, scale=upscale.scale, budget_bytes=upscaling.budget_bytes, check=check,
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
