"""Tiles give the one-pass result: a margin as wide as the network's receptive radius leaves
every kept pixel with the input it sees in one pass, so the two agree to within one level of
255 (float sums in another order can tip a value over a rounding edge; here they are equal).
The tile side is a pure function of the memory budget, the image and the network's width; a
check between tiles stops the run within a tile's time."""

import subprocess
import sys

import numpy as np
import pytest

from imagegen.model.upscalers.rrdbnet import RRDBShape
from imagegen.model.upscalers.tiles import (
    bytes_per_pixel,
    plan_tiles,
    run_one_pass,
    run_tiled,
    tile_side,
)
from tests.support.tiny_upscaler import X1, X2, X4, tiny_net

TOLERANCE = 1  # the most two 8-bit results may differ by, per channel
SHAPES = {"x4": X4, "x2": X2, "x1": X1}
FULL = RRDBShape(in_channels=3, out_channels=3, features=64, growth=32, blocks=23, upsamples=2)


def picture(width: int, height: int) -> np.ndarray:
    return np.random.default_rng(7).integers(0, 256, (height, width, 3), dtype=np.uint8)


def full_margin(shape: RRDBShape) -> int:
    return -(-shape.receptive_radius // shape.unshuffle) * shape.unshuffle


@pytest.mark.parametrize("kind", SHAPES)
def test_tiles_with_the_receptive_margin_give_the_one_pass_result(kind: str):
    shape = SHAPES[kind]
    net = tiny_net(shape)
    pixels = picture(37, 29)  # sides that are no multiple of the tile, nor of the unshuffle
    whole = run_one_pass(net, pixels)
    assert whole.shape == (29 * shape.scale, 37 * shape.scale, 3) and whole.std() > 10
    side = 4 * shape.unshuffle
    assert len(plan_tiles(width=40, height=32, side=side, margin=0)) > 4
    tiled = run_tiled(net, pixels, side=side, margin=full_margin(shape))
    assert tiled.shape == whole.shape
    assert np.abs(tiled.astype(int) - whole).max() <= TOLERANCE


def test_a_margin_narrower_than_the_receptive_radius_shows_at_the_seams():
    """Why the margin: without one, each tile's edge is zero-padded where one pass sees the
    neighbouring pixels."""
    net = tiny_net(X4)
    pixels = picture(32, 32)
    seams = np.abs(run_tiled(net, pixels, side=8, margin=0).astype(int) - run_one_pass(net, pixels))
    assert seams.max() > 4 * TOLERANCE


def test_the_receptive_radius_counts_every_convolution():
    # conv_first, 15 per RRDB, conv_body at the input's resolution, then 1/2 + 1/4 + 2/4.
    assert X4.receptive_radius == 2 + 15 * 2 + 2 + 1
    assert FULL.receptive_radius == 2 + 15 * 23 + 2 + 1
    assert X2.receptive_radius == 2 * (2 + 15 * 2) + 3 + 1  # each low-res pixel is 2 input pixels


def test_the_bytes_per_pixel_formula():
    """4 bytes x (4 maps of `features` at the output's resolution + 4 dense-block buffers of
    features + 4 x growth), over the unshuffle's area."""
    assert bytes_per_pixel(FULL) == 4 * (4 * 64 * 16 + 4 * (64 + 4 * 32))
    assert bytes_per_pixel(X4) == 4 * (4 * 8 * 16 + 4 * (8 + 16))
    assert bytes_per_pixel(X2) == 4 * (4 * 8 * 16 + 4 * (8 + 16)) // 4
    assert bytes_per_pixel(X1) == 4 * (4 * 8 * 16 + 4 * (8 + 16)) // 16


def test_the_tile_side_is_the_largest_square_that_fits_the_budget_with_its_margins():
    per_pixel = bytes_per_pixel(FULL)  # 19,456 bytes
    budget = 2**30
    side = tile_side(budget_bytes=budget, width=1024, height=1024, shape=FULL, margin=32)
    assert side == int((budget / per_pixel) ** 0.5) - 64 == 170
    assert per_pixel * (side + 64) ** 2 <= budget < per_pixel * (side + 65) ** 2
    # The same budget, twice the features: 36,864 bytes a pixel, a smaller side.
    wide = RRDBShape(3, 3, features=128, growth=32, blocks=23, upsamples=2)
    assert bytes_per_pixel(wide) == 36_864
    assert (
        tile_side(budget_bytes=budget, width=1024, height=1024, shape=wide, margin=32) == 170 - 64
    )
    # With a 2x unshuffle the side is a multiple of 2.
    x2 = RRDBShape(12, 3, features=64, growth=32, blocks=23, upsamples=2)
    side = tile_side(budget_bytes=budget, width=1024, height=1024, shape=x2, margin=32)
    assert side % 2 == 0 and side == (int((budget / bytes_per_pixel(x2)) ** 0.5) - 64) // 2 * 2


def test_an_image_that_fits_the_budget_is_one_tile():
    per_pixel = bytes_per_pixel(FULL)
    budget = per_pixel * 200 * 150
    fits = tile_side(budget_bytes=budget, width=200, height=150, shape=FULL, margin=32)
    assert fits == 200
    assert len(plan_tiles(width=200, height=150, side=fits, margin=32)) == 1
    # One byte less and it is cut in tiles: floor(sqrt(29,999)) - 64.
    assert tile_side(budget_bytes=budget - 1, width=200, height=150, shape=FULL, margin=32) == 109


def test_a_budget_too_small_for_one_tile_says_the_least_that_works():
    least = bytes_per_pixel(FULL) * (32 + 64) ** 2
    assert tile_side(budget_bytes=least, width=1024, height=1024, shape=FULL, margin=32) == 32
    with pytest.raises(
        ValueError, match=f"memory budget {least - 1} bytes is too small.*needs {least} bytes"
    ):
        tile_side(budget_bytes=least - 1, width=1024, height=1024, shape=FULL, margin=32)


def test_the_check_runs_before_each_tile_and_stops_the_run_by_raising():
    class Stopped(Exception):
        pass

    done: list[tuple[int, int]] = []
    checks = 0

    def check() -> None:
        nonlocal checks
        checks += 1
        if checks == 3:
            raise Stopped

    with pytest.raises(Stopped):
        run_tiled(
            tiny_net(X4),
            picture(32, 32),
            side=8,
            margin=8,
            check=check,
            progress=lambda *p: done.append(p),
        )
    assert done == [(1, 16), (2, 16)]  # the third tile never ran


def test_progress_counts_every_tile():
    done: list[tuple[int, int]] = []
    run_tiled(tiny_net(X2), picture(20, 12), side=8, margin=4, progress=lambda *p: done.append(p))
    assert done == [(n, 6) for n in range(1, 7)]  # 3 across, 2 down (12 rows: 8 + 4)


def test_tile_and_margin_must_fit_the_unshuffle():
    with pytest.raises(ValueError, match="multiples of 4"):
        run_tiled(tiny_net(X1), picture(16, 16), side=6, margin=4)


def test_freed_heap_memory_goes_back_between_tiles():
    """What a tile frees in the C heap below a block still in use stays resident until it is
    handed back (glibc); release_freed_memory, run after each tile, hands it back. In a fresh
    process: 200 MiB of 1 MiB blocks kept in the heap, freed under a live one."""
    script = """
import ctypes, sys
from pathlib import Path
from imagegen.model.upscalers.tiles import release_freed_memory
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.mallopt(-3, 64 * 2**20)  # M_MMAP_THRESHOLD: 1 MiB blocks from the heap, not mmap
def rss():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
blocks = [libc.malloc(2**20) for _ in range(200)]
for block in blocks:
    ctypes.memset(block, 1, 2**20)
above = libc.malloc(4 * 2**20)  # from the top: keeps the freed blocks below it
for block in blocks:
    libc.free(block)
freed = rss()
release_freed_memory()
print(freed - rss())
"""
    answer = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert int(answer.stdout) > 150 * 2**20, answer.stdout
