"""How close to the machine: the work of one image counted in FLOPs, and this machine's own
fp32 peak measured at the torch thread count a bench uses. Not a benchmark itself; the
time-to-image bench puts both beside its seconds (issue: "How close to the machine").

Why counted and measured here rather than taken from a datasheet: a guessed peak (cores x FMA
units x lanes x clock) was wrong on the VMs this runs on (boost clocks, shared cores), so the
same decode read as 80 % and 130 % of it. The denominator is measured in the same run as the
figures it divides: a large matrix multiply and a 3x3 convolution at the shapes of the VAE's
decoder, best of a few, each at the bench's thread count.

FLOPs are counted by torch's FlopCounterMode (2 FLOPs per multiply-add, as its formulas
count) on the meta device, from the model's own configs: no weights are read, so counting an
SDXL image takes seconds. On the meta device attention runs as its matrix products and is
counted; a real CPU run would leave it out (the counter has no formula for the CPU's fused
attention kernel), so these are the work done, attention included. Counted: each text
encoder on 77 tokens; one UNet call at the image's latent size for a batch of 1 (a call with
guidance runs a batch of 2: twice that); the full VAE's decode, as one piece and in the
tiles it runs in (they overlap by a quarter and each is decoded whole: SDXL's 1024x1024 in
tiles of 512 is 1.5x the work of the whole image, 15.7 TFLOP against 10.5), and the tiny
decoder's; the VAE's encode of an input image (edits).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script too

from imagegen.generation import work as service_work


@dataclass(frozen=True)
class Work:
    """FLOPs of the stages of one image of `side` x `side` (batch 1)."""

    side: int
    encode: float  # the text encoders, all of them
    unet_call: float  # one UNet call, batch 1
    decode_full: float
    decode_tiny: float | None  # None: no tiny decoder given
    encode_image: float  # the full VAE's encoder on an input image (an edit)
    # The full VAE's decode in the tiles the service and the bench's plain diffusers use
    # (VAE_TILE_SIZE's default): SDXL at 1024x1024 1.5x decode_full. None: not counted.
    decode_tiled: float | None = None

    def decode(self, *, tiny: bool) -> float:
        """The decode as it runs: the tiny decoder's, or the full VAE's in its tiles."""
        if tiny and self.decode_tiny is not None:
            return self.decode_tiny
        return self.decode_full if self.decode_tiled is None else self.decode_tiled

    def image(self, *, calls: int, batch: int, tiny: bool) -> float:
        """All of one image: the prompt, `calls` UNet calls of `batch`, the decode."""
        return self.encode + calls * batch * self.unet_call + self.decode(tiny=tiny)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def count_work(model_path: Path, side: int, tiny_path: Path | None = None, tile: int = 0) -> Work:
    """The FLOPs of one image at `side` x `side` of the diffusers repo at `model_path` (its
    configs only), with the tiny decoder at `tiny_path` if given, and the full decode in
    tiles of `tile` pixels too if given (count_decode): the service's own count
    (imagegen.generation.work), each decode apart."""
    counted = service_work.count_work(
        model_path, tiny_decoder=None, tile=0, side=side, whole_decode=True
    )
    tiny = None
    if tiny_path is not None:
        tiny = service_work.count_decode(model_path, side, tiny_decoder=tiny_path)
    tiled = count_decode(model_path, side, tile) if tile else None
    return Work(side, counted.text, counted.unet_call, counted.decode, tiny, counted.image_encode,
                tiled)  # fmt: skip


def count_decode(model_path: Path, side: int, tile: int) -> float:
    """The FLOPs of the full VAE's decode of one `side` x `side` image in tiles of `tile`
    pixels as VAE_TILE_SIZE makes them (0: whole). Tiles overlap by a quarter and each is
    decoded whole, so SDXL's 1024x1024 decode in tiles of 512 is 1.5x the whole image's
    work: a tiled decode's fraction of peak divides by this, not by the whole count."""
    return service_work.count_decode(model_path, side, tile=tile, whole=not tile)


@dataclass(frozen=True)
class Peak:
    """This machine's fp32 FLOP/s at `threads` torch threads, each the best of a few runs."""

    threads: int
    matmul: float  # a 4096 x 4096 by 4096 x 4096 matrix multiply
    conv: float  # 3x3 convolutions at the VAE decoder's shapes (best of them)
    conv_shapes: dict[str, float]

    @property
    def best(self) -> float:
        """The denominator of "fraction of peak": the faster of the two."""
        return max(self.matmul, self.conv)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"best": self.best}


# The 3x3 convolutions of SDXL's (and SD 1.5's) VAE decoder at a 1024x1024 image: channels
# in and out and the feature map's side. The decoder's work is nearly all of these. Its tiles
# (512 and 256 pixels: VAE_TILE_SIZE) run the same channels on maps of a half and a quarter
# of the side, so those are measured too (on 2026-11-25 the best of them, 512ch@32, was 5 %
# above the whole image's best).
VAE_CONVS = {"512ch@128": (512, 128), "512ch@256": (512, 256), "256ch@512": (256, 512),
             "128ch@1024": (128, 1024),
             "512ch@32": (512, 32), "512ch@64": (512, 64), "256ch@128": (256, 128),
             "256ch@256": (256, 256), "128ch@256": (128, 256), "128ch@512": (128, 512)}  # fmt: skip


def measure_peak(threads: int, repeats: int = 3) -> Peak:
    """Best of `repeats` of each, after one warm-up: the machine's own denominator."""
    import torch

    torch.set_num_threads(threads)

    def best(run: Any, work: float) -> float:
        run()  # warm-up: kernels chosen, pages touched
        seconds = []
        for _ in range(repeats):
            started = time.perf_counter()
            run()
            seconds.append(time.perf_counter() - started)
        return work / min(seconds)

    with torch.inference_mode():
        n = 4096
        a, b = torch.randn(n, n), torch.randn(n, n)
        matmul = best(lambda: a @ b, 2.0 * n**3)
        shapes = {}
        for label, (channels, side) in VAE_CONVS.items():
            conv = torch.nn.Conv2d(channels, channels, 3, padding=1)
            x = torch.randn(1, channels, side, side)
            work = 2.0 * channels * channels * 9 * side * side
            shapes[label] = best(lambda conv=conv, x=x: conv(x), work)
            del conv, x
    return Peak(threads, matmul, max(shapes.values()), shapes)


def fraction(flops: float, seconds: float, peak: Peak) -> tuple[float, float]:
    """(achieved FLOP/s, its fraction of the measured peak)."""
    achieved = flops / seconds if seconds > 0 else 0.0
    return achieved, achieved / peak.best


def describe_peak(peak: Peak) -> str:
    convs = ", ".join(f"{k} {v / 1e9:.0f}" for k, v in peak.conv_shapes.items())
    return (
        f"measured fp32 peak at {peak.threads} threads: matmul {peak.matmul / 1e9:.0f} GFLOP/s, "
        f"3x3 conv {peak.conv / 1e9:.0f} GFLOP/s ({convs})"
    )


def main() -> int:
    """`python bench/efficiency.py MODEL_PATH SIDE [TINY_PATH] [--threads N]`: the counts and
    the peak, as JSON (a smoke run of both)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("model_path", type=Path)
    parser.add_argument("side", type=int)
    parser.add_argument("tiny_path", type=Path, nargs="?")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    work = count_work(args.model_path, args.side, args.tiny_path)
    peak = measure_peak(args.threads, args.repeats)
    print(describe_peak(peak))
    print(json.dumps({"work": work.as_dict(), "peak": peak.as_dict()}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
