"""The one interface every upscaler has, a PIL image in and the upscaled image out, whether it
is a network (`ModelUpscaler`) or one of Pillow's filters with no weights (`LANCZOS`,
`NEAREST`), so what calls it never asks which.

The output's scale is the one asked, whatever the network's own, as A1111 does: a 4x network
asked for 2x runs at 4x and the result is resized to 2x with Lanczos; asked for more than its
own it runs again on its output (at most three passes, A1111's bound) and is resized down to
the size asked."""

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
from PIL import Image

from imagegen.model.upscalers.esrgan_files import load_esrgan
from imagegen.model.upscalers.rrdbnet import RRDBNet
from imagegen.model.upscalers.tiles import (
    DEFAULT_MARGIN,
    Check,
    Progress,
    picture_bytes,
    plan_tiles,
    run_tiled,
    tile_side,
)

MAX_PASSES = 3


class Upscaler(Protocol):
    @property
    def name(self) -> str:
        """What a request calls it by."""

    @property
    def scale(self) -> int | None:
        """The network's own scale; None for a filter, which has none."""

    def upscale(
        self,
        image: Image.Image,
        *,
        scale: float,
        budget_bytes: int,
        check: Check | None = None,
        progress: Progress | None = None,
    ) -> Image.Image:
        """`image` resized to round(side x scale) on each side, in RGB."""


def target_size(image: Image.Image, scale: float) -> tuple[int, int]:
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a number above 0, not {scale}")
    return max(1, round(image.width * scale)), max(1, round(image.height * scale))


@dataclass(frozen=True)
class FilterUpscaler:
    """One of Pillow's resampling filters: no weights, any scale, one step."""

    name: str
    resample: Image.Resampling
    scale: None = None

    def upscale(
        self,
        image: Image.Image,
        *,
        scale: float,
        budget_bytes: int,
        check: Check | None = None,
        progress: Progress | None = None,
    ) -> Image.Image:
        size = target_size(image, scale)
        if check is not None:
            check()
        resized = image.convert("RGB").resize(size, self.resample)
        if progress is not None:
            progress(1, 1)
        return resized


LANCZOS = FilterUpscaler("Lanczos", Image.Resampling.LANCZOS)
NEAREST = FilterUpscaler("Nearest", Image.Resampling.NEAREST)


@dataclass(frozen=True)
class ModelUpscaler:
    """A network run in tiles sized to the caller's memory budget (which covers the tiles'
    activations; the weights are the caller's to count)."""

    name: str
    net: RRDBNet
    margin: int = DEFAULT_MARGIN

    @property
    def scale(self) -> int:
        return self.net.shape.scale

    def upscale(
        self,
        image: Image.Image,
        *,
        scale: float,
        budget_bytes: int,
        check: Check | None = None,
        progress: Progress | None = None,
    ) -> Image.Image:
        size = target_size(image, scale)
        passes = self.passes(image.size, size)
        sides = [self._side(width, height, budget_bytes) for width, height in passes]
        counts = [
            len(plan_tiles(width=width, height=height, side=side, margin=self.margin))
            for (width, height), side in zip(passes, sides, strict=True)
        ]
        pixels = np.asarray(image.convert("RGB"))
        done_before = 0
        for side, count in zip(sides, counts, strict=True):
            pixels = run_tiled(
                self.net, pixels, side=side, margin=self.margin, check=check,
                progress=_offset(progress, done_before, sum(counts)),
            )  # fmt: skip
            done_before += count
        result = Image.fromarray(pixels)
        return result if result.size == size else result.resize(size, Image.Resampling.LANCZOS)

    def passes(self, start: tuple[int, int], size: tuple[int, int]) -> list[tuple[int, int]]:
        """The input size of each pass: one at least, more while the output is smaller than
        asked and the network enlarges (a 1x network runs once)."""
        sizes, (width, height) = [start], start
        factor = self.net.shape.scale
        while (
            len(sizes) < MAX_PASSES
            and factor > 1
            and (width * factor < size[0] or height * factor < size[1])
        ):
            width, height = width * factor, height * factor
            sizes.append((width, height))
        return sizes

    def picture_bytes(self, start: tuple[int, int], size: tuple[int, int]) -> int:
        """What the upscale of a `start` picture to `size` holds for the picture beside its
        tiles, in its largest pass (tiles.picture_bytes)."""
        return max(
            picture_bytes(width=width, height=height, scale=self.scale)
            for width, height in self.passes(start, size)
        )

    def _side(self, width: int, height: int, budget_bytes: int) -> int:
        return tile_side(
            budget_bytes=budget_bytes,
            width=width,
            height=height,
            shape=self.net.shape,
            margin=self.margin,
        )


def load_model_upscaler(path: Path, *, name: str | None = None) -> ModelUpscaler:
    """An ESRGAN-family file as an upscaler named `name`, or its file's stem."""
    return ModelUpscaler(name or path.stem, load_esrgan(path))


def _offset(progress: Progress | None, before: int, total: int) -> Progress | None:
    if progress is None:
        return None
    report: Callable[[int, int], None] = progress
    return lambda done, _count: report(before + done, total)
