"""ESRGAN x4 upscale benchmark: the service's tiled run beside the same network called plainly
in one pass, in the same run.

Why it exists: the upscaler runs in tiles sized to a memory budget
(imagegen/model/upscalers/tiles.py) so a big image never holds the whole network's
activations; the tiles' margins are computed twice, so tiles cost time. This measures that
cost, the peak memory of each way, and how far the tiled picture is from the one-pass one.

A full-size ESRGAN x4 (23 blocks, 64 features, 32 growth: 16.7 M parameters, random weights,
seeded) upscales a seeded noise picture. Each variant runs in a fresh child process, so each
peak RSS is its own. One pass of a 1024x1024 picture needs about 14 GB of activations
(tiles.bytes_per_pixel); when the machine has not that much free, the one pass runs at
--compare-size (512) and the tiles run at that size too, beside the tiles at --size.

    .venv/bin/python bench/upscale_bench.py             # 1024x1024 tiled, one pass where it fits
    .venv/bin/python bench/upscale_bench.py --size 256  # the full network on a smaller picture
    .venv/bin/python bench/upscale_bench.py --quick     # a tiny network, 96x96, in process
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from bench.common import GIB, fmt_ratio, ratio  # noqa: E402
from bench.model_fixture import scratch_dir  # noqa: E402

SCRIPT = Path(__file__).resolve()
SEED = 42
FULL = {"features": 64, "growth": 32, "blocks": 23}  # ESRGAN's and Real-ESRGAN's x4
QUICK = {"features": 8, "growth": 4, "blocks": 2}
MIB = 2**20


@dataclass
class Run:
    variant: str  # "tiled" or "one_pass"
    size: int
    seconds: float
    tiles: int
    tile_side: int
    computed_pixels: int  # input pixels run through the network, margins included
    peak_rss_bytes: int
    peak_anon_over_start_bytes: int  # what the upscale itself added: its activations
    weights_bytes: int


def network(quick: bool) -> Any:
    import torch

    from imagegen.model.upscalers.rrdbnet import RRDBNet, RRDBShape

    torch.manual_seed(SEED)
    sizes = QUICK if quick else FULL
    return RRDBNet(RRDBShape(in_channels=3, out_channels=3, upsamples=2, **sizes)).eval()


def picture(size: int) -> Any:
    import numpy as np

    return np.random.default_rng(SEED).integers(0, 256, (size, size, 3), dtype=np.uint8)


def measure(variant: str, size: int, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """One variant in this process; the upscaled pixels are saved to `out` (.npy)."""
    import numpy as np
    import torch

    from imagegen.model.upscalers.tiles import plan_tiles, run_one_pass, run_tiled, tile_side

    torch.set_num_threads(args.threads)
    net = network(args.quick)
    pixels = picture(size)
    weights = sum(p.numel() * p.element_size() for p in net.parameters())
    with torch.inference_mode():  # warm the kernels on a small piece
        net(torch.rand(1, 3, 16, 16))
    if variant == "tiled":
        side = tile_side(
            budget_bytes=args.budget, width=size, height=size, shape=net.shape, margin=args.margin
        )
        tiles = plan_tiles(width=size, height=size, side=side, margin=args.margin)
        computed = sum((t.run_bottom - t.run_top) * (t.run_right - t.run_left) for t in tiles)
    else:
        side, tiles, computed = size, [], size * size
    start_anon = common.proc_status_bytes("RssAnon")
    peak = common.PeakMemory()
    started = time.perf_counter()
    if variant == "tiled":
        result = run_tiled(net, pixels, side=side, margin=args.margin)
    else:
        result = run_one_pass(net, pixels)
    seconds = time.perf_counter() - started
    peaks = peak.stop()
    np.save(out, result)
    return {
        "seconds": seconds,
        "tiles": max(1, len(tiles)),
        "tile_side": side,
        "computed_pixels": computed,
        "peak_anon_over_start_bytes": peaks["peak_anon_bytes"] - start_anon,
        "weights_bytes": weights,
    }


def run_as_child(args: argparse.Namespace) -> int:
    variant, size, out = args.child
    common.emit_child_result(measure(variant, int(size), args, Path(out)))
    return 0


def measure_variant(variant: str, size: int, args: argparse.Namespace, work: Path) -> Run:
    out = work / f"{variant}-{size}.npy"
    if args.quick:  # in process: the smoke run starts no process
        result = measure(variant, size, args, out)
        result["peak_rss_bytes"] = common.proc_status_bytes("VmHWM")
    else:
        result = common.run_child(
            SCRIPT,
            [variant, str(size), str(out), "--threads", str(args.threads), "--budget",
             str(args.budget), "--margin", str(args.margin)],
            work / f"{variant}-{size}.log", timeout=4 * 3600, env={},
        )  # fmt: skip
    row = Run(variant=variant, size=size, **result)
    print(
        f"  {variant:<8} {size}x{size}: {row.seconds:.1f} s | {row.tiles} tiles of "
        f"{row.tile_side} | computed {row.computed_pixels / size**2:.2f}x the pixels | peak RSS "
        f"{row.peak_rss_bytes / GIB:.2f} GiB (+{row.peak_anon_over_start_bytes / GIB:.2f} GiB "
        "during the upscale)",
        flush=True,
    )
    return row


def one_pass_size(args: argparse.Namespace) -> int:
    """The size the one pass runs at: --size where its activations fit in half the memory
    free now, else --compare-size."""
    from imagegen.model.upscalers.rrdbnet import RRDBShape
    from imagegen.model.upscalers.tiles import bytes_per_pixel

    shape = RRDBShape(3, 3, upsamples=2, **(QUICK if args.quick else FULL))
    needed = bytes_per_pixel(shape) * args.size**2
    return args.size if needed <= common.mem_available_bytes() // 2 else args.compare_size


def fastest(runs: list[Run], variant: str, size: int) -> Run:
    """A variant's figure: its fastest run (the one least slowed by the machine's other work)."""
    return min(
        (r for r in runs if r.variant == variant and r.size == size), key=lambda r: r.seconds
    )


def difference(work: Path, size: int) -> int:
    import numpy as np

    tiled = np.load(work / f"tiled-{size}.npy").astype(int)
    return int(np.abs(tiled - np.load(work / f"one_pass-{size}.npy")).max())


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024, help="the picture's side (1024)")
    parser.add_argument(
        "--compare-size",
        type=int,
        default=512,
        help="one pass's side when --size does not fit (512)",
    )
    parser.add_argument(
        "--budget", type=int, default=2 * GIB, help="tile memory budget, bytes (2 GiB)"
    )
    parser.add_argument(
        "--margin", type=int, help="tile margin, input pixels (the service's default)"
    )
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count() or 1, help="torch threads (nproc)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="a tiny network at 96x96, in process, 1 thread"
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="tiled and one pass, alternating which goes first (2)"
    )
    parser.add_argument("--json", type=Path, help="where to write results")
    parser.add_argument(
        "--child", nargs=3, metavar=("VARIANT", "SIZE", "OUT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.size, args.compare_size, args.threads, args.rounds = 96, 96, 1, 1
        args.budget = min(args.budget, 10 * MIB)  # the tiny network's 96x96 in nine tiles
    if args.margin is None:
        from imagegen.model.upscalers.tiles import DEFAULT_MARGIN

        args.margin = DEFAULT_MARGIN
    return args


def run(args: argparse.Namespace) -> int:
    machine = common.machine_info()
    common.print_machine(machine, f"torch threads {args.threads}")
    compare = one_pass_size(args)
    sizes = QUICK if args.quick else FULL
    print(
        f"network: RRDBNet x4, {sizes['blocks']} blocks, {sizes['features']} features, "
        f"{sizes['growth']} growth, random weights | {args.size}x{args.size} tiled, budget "
        f"{args.budget / MIB:.0f} MiB, margin {args.margin} | one pass at {compare}x{compare}"
        f"{' (the full size needs more than half the free memory)' if compare != args.size else ''}"
        f"{' | quick, in process' if args.quick else ''}",
        flush=True,
    )
    if not args.quick:  # the first touch of fresh guest memory is slow: not any variant's cost
        from imagegen.model.upscalers.rrdbnet import RRDBShape
        from imagegen.model.upscalers.tiles import bytes_per_pixel

        wanted = bytes_per_pixel(RRDBShape(3, 3, upsamples=2, **sizes)) * compare**2
        primed = common.prime_size(wanted)
        print(f"  primed {primed / GIB:.1f} GiB of memory in {common.prime_memory(primed):.1f} s")
    work = scratch_dir("upscale-bench-")
    try:
        runs = [measure_variant("tiled", args.size, args, work)] if compare != args.size else []
        for round_ in range(args.rounds):  # tiled first, then one pass first, and so on
            order = ("tiled", "one_pass") if round_ % 2 == 0 else ("one_pass", "tiled")
            runs += [measure_variant(variant, compare, args, work) for variant in order]
        worst = difference(work, compare)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    tiled = fastest(runs, "tiled", compare)
    plain = fastest(runs, "one_pass", compare)
    common.print_table(
        [("variant", 10), ("side", 6), ("s", 8), ("vs plain", 8), ("tiles", 6), ("computed", 9),
         ("peak GiB", 9), ("+ GiB", 7), ("what", 0)],
        [[r.variant, str(r.size), f"{r.seconds:.1f}",
          fmt_ratio(ratio(r.seconds, plain.seconds)) if r.size == compare else "-",
          str(r.tiles), f"{r.computed_pixels / r.size**2:.2f}x", f"{r.peak_rss_bytes / GIB:.2f}",
          f"{r.peak_anon_over_start_bytes / GIB:.2f}",
          "the network called once on the picture" if r.variant == "one_pass"
          else f"tiles of {r.tile_side} + {args.margin} margin, budget {args.budget / MIB:.0f} MiB"]
         for r in runs],
    )  # fmt: skip
    summary = (
        f"summary: ESRGAN x4 ({sizes['blocks']} blocks) at {compare}x{compare}, {args.threads} "
        f"threads: tiled {tiled.seconds:.1f} s = {fmt_ratio(ratio(tiled.seconds, plain.seconds))} "
        f"one pass ({plain.seconds:.1f} s), peak RSS {tiled.peak_rss_bytes / GIB:.2f} vs "
        f"{plain.peak_rss_bytes / GIB:.2f} GiB, max pixel difference {worst}/255"
    )
    document = {
        "config": {
            "size": args.size, "compare_size": compare, "budget_bytes": args.budget,
            "margin": args.margin, "threads": args.threads, "rounds": args.rounds,
            "quick": args.quick, "seed": SEED,
            "network": sizes,
        },
        "runs": [asdict(r) for r in runs],
        "max_pixel_difference": worst,
        "ratios": {"tiled_vs_one_pass_seconds": ratio(tiled.seconds, plain.seconds),
                   "tiled_vs_one_pass_peak_rss": ratio(tiled.peak_rss_bytes, plain.peak_rss_bytes)},
    }  # fmt: skip
    common.finish("upscale", machine, document, summary, args.json)
    return 0


def main(argv: list[str] | None = None) -> int:
    return common.main(parse_args, run, run_as_child, argv)


if __name__ == "__main__":
    sys.exit(main())
