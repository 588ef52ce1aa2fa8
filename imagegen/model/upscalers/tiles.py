"""Runs an RRDBNet over an image in square tiles, each with a margin of real pixels around it
that is computed and thrown away, so only the tile's own output is kept.

Why tiles differ from one pass at all: an output pixel depends on the input within the
network's receptive radius (`RRDBShape.receptive_radius`, 350 input pixels for a 23-block
ESRGAN). With a margin at least that wide every kept pixel saw exactly the input it sees in
one pass, and the two agree up to float rounding (convolutions of other sizes sum in another
order), which the 8-bit output turns into at most one level (of 255) where a value sits on a
rounding edge. A narrower margin (the default, 16, as Real-ESRGAN's 10 and A1111's 8 for
trained networks: a full one would make a 23-block network's tiles mostly margin) leaves the
far part of the receptive field zero-padded at interior tile edges; bench/upscale_bench.py
measures the difference that makes.

The tile's side comes from a memory budget (`tile_side`), so a big image never holds the
whole network's activations at once: after the last 2x stage a tile holds a few
`features`-channel maps at the output's resolution, the peak. Measured (dev, 2026-11-28:
64 features, 4x) at 3.3 such maps plus the dense blocks' buffers; the estimate counts four
of each, so it stays above what runs."""

import ctypes
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional

from imagegen.model.upscalers.rrdbnet import RRDBNet, RRDBShape

FLOAT_BYTES = 4  # fp32 throughout
MAPS_AT_OUTPUT = 4  # feature maps alive at once at the last stage's resolution (measured 3.3)
MAPS_IN_BODY = 4  # dense-block buffers alive at once at the body's resolution
MIN_TILE = 32  # the smallest tile side (input pixels) worth its margins
DEFAULT_MARGIN = 16  # input pixels around each tile by default (Real-ESRGAN pads 10, A1111 8)
# What a pass holds for its picture beside the tiles, per input pixel: the caller's decoded
# image (Pillow keeps RGB in 4 bytes), its uint8 copy (3) and its float tensor (12); per
# output pixel, the uint8 output (3).
HELD_PER_INPUT_PIXEL = 4 + 3 + 12
HELD_PER_OUTPUT_PIXEL = 3

Check = Callable[[], None]
Progress = Callable[[int, int], None]


def bytes_per_pixel(shape: RRDBShape) -> int:
    """Estimated peak bytes per input pixel of a tile (margins included):
    4 x (4 x features x U^2 + 4 x (features + 4 x growth)) / f^2, where U is 2 to the number of
    2x stages and f the pixel unshuffle's factor (1, 2 or 4)."""
    at_output = MAPS_AT_OUTPUT * shape.features * 4**shape.upsamples
    in_body = MAPS_IN_BODY * (shape.features + 4 * shape.growth)
    return math.ceil(FLOAT_BYTES * (at_output + in_body) / shape.unshuffle**2)


def picture_bytes(*, width: int, height: int, scale: int) -> int:
    """The bytes a pass over a width x height input holds for its picture while its tiles run:
    a budget for the whole upscale leaves the tiles this much less."""
    pixels = width * height
    return HELD_PER_INPUT_PIXEL * pixels + HELD_PER_OUTPUT_PIXEL * pixels * scale**2


def tile_side(*, budget_bytes: int, width: int, height: int, shape: RRDBShape, margin: int) -> int:
    """The tile's side in input pixels (a multiple of the unshuffle factor): the whole image
    when it fits the budget in one piece, else the largest square whose tile plus a margin on
    each side fits: floor(sqrt(budget / bytes_per_pixel)) - 2 x margin, rounded down to the
    factor. A budget below one MIN_TILE tile with its margins is a ValueError saying the
    least that works."""
    factor = shape.unshuffle
    per_pixel = bytes_per_pixel(shape)
    whole = _round_up(max(width, height), factor)
    if per_pixel * _round_up(width, factor) * _round_up(height, factor) <= budget_bytes:
        return whole
    side = (math.isqrt(budget_bytes // per_pixel) - 2 * margin) // factor * factor
    if side < MIN_TILE:
        least = per_pixel * (_round_up(MIN_TILE, factor) + 2 * margin) ** 2
        raise ValueError(
            f"memory budget {budget_bytes} bytes is too small: a {MIN_TILE}-pixel tile with a "
            f"{margin}-pixel margin needs {least} bytes for this network"
        )
    return min(side, whole)


@dataclass(frozen=True)
class Tile:
    """One tile in padded-input pixels: the region run (tile plus margins, clipped to the
    image) and the part of it kept."""

    run_top: int
    run_left: int
    run_bottom: int
    run_right: int
    top: int
    left: int
    bottom: int
    right: int


def plan_tiles(*, width: int, height: int, side: int, margin: int) -> list[Tile]:
    return [
        Tile(max(0, top - margin), max(0, left - margin),
             min(height, top + side + margin), min(width, left + side + margin),
             top, left, min(height, top + side), min(width, left + side))
        for top in range(0, height, side)
        for left in range(0, width, side)
    ]  # fmt: skip


def to_tensor(pixels: np.ndarray, factor: int) -> torch.Tensor:
    """HxWx3 uint8 to 1x3xH'xW' floats in [0, 1], the sides padded (edge pixels repeated) to
    multiples of the unshuffle factor; both the tiled and the one-pass run start from it."""
    tensor = torch.from_numpy(np.array(pixels)).permute(2, 0, 1).unsqueeze(0).float().div_(255)
    height, width = pixels.shape[:2]
    pad_bottom, pad_right = _round_up(height, factor) - height, _round_up(width, factor) - width
    if pad_bottom or pad_right:
        tensor = functional.pad(tensor, (0, pad_right, 0, pad_bottom), mode="replicate")
    return tensor


def to_pixels(output: torch.Tensor) -> np.ndarray:
    """1x3xHxW floats to HxWx3 uint8, as Real-ESRGAN rounds them."""
    return output[0].clamp_(0, 1).mul_(255).round_().to(torch.uint8).permute(1, 2, 0).numpy()


def run_one_pass(net: RRDBNet, pixels: np.ndarray) -> np.ndarray:
    """The whole image through the network at once: the reference tiles are held to."""
    height, width = pixels.shape[:2]
    scale = net.shape.scale
    with torch.inference_mode():
        return to_pixels(net(to_tensor(pixels, net.shape.unshuffle)))[
            : height * scale, : width * scale
        ]


def run_tiled(
    net: RRDBNet,
    pixels: np.ndarray,
    *,
    side: int,
    margin: int,
    check: Check | None = None,
    progress: Progress | None = None,
) -> np.ndarray:
    """The image through the network tile by tile; `check` runs before each tile (it stops
    the run by raising, so a cancel waits at most one tile), `progress(done, total)` after
    each."""
    factor, scale = net.shape.unshuffle, net.shape.scale
    if side % factor or margin % factor:
        raise ValueError(f"tile side {side} and margin {margin} must be multiples of {factor}")
    height, width = pixels.shape[:2]
    image = to_tensor(pixels, factor)
    padded_height, padded_width = image.shape[2:]
    out = np.empty((padded_height * scale, padded_width * scale, 3), dtype=np.uint8)
    tiles = plan_tiles(width=padded_width, height=padded_height, side=side, margin=margin)
    for done, tile in enumerate(tiles):
        if check is not None:
            check()
        with torch.inference_mode():
            result = net(
                image[:, :, tile.run_top : tile.run_bottom, tile.run_left : tile.run_right]
            )
            kept = result[
                :, :,
                (tile.top - tile.run_top) * scale : (tile.bottom - tile.run_top) * scale,
                (tile.left - tile.run_left) * scale : (tile.right - tile.run_left) * scale,
            ]  # fmt: skip
            top, left, bottom, right = (tile.top * scale, tile.left * scale,
                                        tile.bottom * scale, tile.right * scale)  # fmt: skip
            out[top:bottom, left:right] = to_pixels(kept)
        del result, kept
        release_freed_memory()
        if progress is not None:
            progress(done + 1, len(tiles))
    return out[: height * scale, : width * scale]


def release_freed_memory() -> None:
    """Hands the C heap's free pages back to the system between tiles (glibc's malloc_trim;
    nothing where the C library has none). A tile's mid-sized activations land in the heap,
    and what they free there stays resident otherwise: measured (dev, 2026-11-29) at 30 MiB
    of a 1024x1024 picture's RSS after 12 tiles of the full-size x4 network."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


def _round_up(value: int, factor: int) -> int:
    return -(-value // factor) * factor
