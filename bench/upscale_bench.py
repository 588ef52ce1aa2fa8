"""ESRGAN x4 upscale benchmark: the service's tiled run beside the same network called plainly
in one pass, in the same run, and the peak memory of an upscale with a diffusion model resident.

Why it exists: the upscaler runs in tiles sized to a memory budget
(imagegen/model/upscalers/tiles.py) so a big image never holds the whole network's
activations; the tiles' margins are computed twice, so tiles cost time. This measures that
cost (and whether the margins explain all of it: seconds per computed pixel), the peak memory
of each way, and how far the tiled picture is from the one-pass one.

A full-size ESRGAN x4 (23 blocks, 64 features, 32 growth: 16.7 M parameters, random weights,
seeded) is saved as Real-ESRGAN saves it (`params_ema` in a .pth) and read back by the
service's loader (imagegen.model.upscalers.upscaler.load_model_upscaler); it upscales a
seeded noise picture. Each variant runs in a fresh child process, so each peak is its own:

- one_pass: the network called once on the whole picture (the baseline);
- resident: ModelUpscaler.upscale at 4x, then the PNG encoding a job does, with a diffusion
  model loaded first (--resident, full-size random SD 1.5 in fp32) at the tile budget given
  (--budget: by default `auto`, the service's rule: a tenth of the resident models' fp32
  weights less the picture's buffers, imagegen.generation.upscale.tile_budget), then the same
  at the budget that keeps the peak within --resident-target (1.1x) of the model's resident
  size (the process's RSS with it loaded) plus the upscaler's (unless --no-target);
- service: the first of those with no model loaded (--quick, where --resident is not given).

One pass of a 1024x1024 picture needs about 14 GB of activations (13.3 KB an input pixel);
when the machine has not that much free beside a safety margin, the one pass and the
comparison run at --compare-size (512).

    .venv/bin/python bench/upscale_bench.py             # 1024, one pass where it fits, else 512
    .venv/bin/python bench/upscale_bench.py --size 512  # all at 512
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
RESIDENT = ROOT / "bench" / ".cache" / "hub" / "bench" / "sd15-random"
AUTO = -2  # the budget: the service's automatic rule (TARGET = -1: the peak target's)
HEADROOM = 4 * GIB  # left free beside a one pass, for the other work on the machine


@dataclass
class Run:
    variant: str  # "one_pass", "service" or "resident"
    size: int
    budget_bytes: int  # the tiles' budget (0 for the one pass)
    seconds: float
    tiles: int
    tile_side: int
    computed_pixels: int  # input pixels run through the network, margins included
    peak_rss_bytes: int
    peak_anon_over_start_bytes: int  # what the upscale itself added: its activations
    weights_bytes: int
    resident_model_bytes: int  # RSS with the diffusion model loaded (0: none loaded)
    rss_before_bytes: int  # RSS just before the upscale (model, upscaler, runtime)
    peak_during_bytes: int  # the highest RSS sampled during the upscale


def network(quick: bool) -> Any:
    import torch

    from imagegen.model.upscalers.rrdbnet import RRDBNet, RRDBShape

    torch.manual_seed(SEED)
    sizes = QUICK if quick else FULL
    return RRDBNet(RRDBShape(in_channels=3, out_channels=3, upsamples=2, **sizes)).eval()


def save_network(quick: bool, path: Path) -> Path:
    """The seeded network's weights as Real-ESRGAN saves them: under `params_ema`, a .pth."""
    import torch

    torch.save({"params_ema": network(quick).state_dict()}, path)
    return path


def picture(size: int) -> Any:
    import numpy as np

    return np.random.default_rng(SEED).integers(0, 256, (size, size, 3), dtype=np.uint8)


def load_resident(model: Path) -> tuple[int, int]:
    """A diffusion pipeline loaded in fp32 as the service holds one; the process's RSS then
    (the model's resident size: its weights and the runtime that runs them) and its fp32
    weights (what the service's automatic budget is a share of)."""
    import torch
    from diffusers import DiffusionPipeline

    from imagegen.model.memory import weights_bytes

    pipe = DiffusionPipeline.from_pretrained(model, variant="fp16", dtype=torch.float32)
    load_resident.pipe = pipe  # type: ignore[attr-defined]  # held for the run
    return common.proc_status_bytes("VmRSS"), weights_bytes(pipe.components.values())


def measure(
    variant: str, size: int, budget: int, args: argparse.Namespace, out: Path
) -> dict[str, Any]:
    """One variant in this process; the upscaled pixels are saved to `out` (.npy). A budget
    of -1 (resident only) is the one that keeps the peak within --resident-target of the
    model's resident size plus the upscaler's; AUTO, the service's rule for the model loaded."""
    import io

    import numpy as np
    import torch
    from PIL import Image

    from imagegen.generation.upscale import held_bytes, tile_budget
    from imagegen.model.upscalers.tiles import plan_tiles, run_one_pass
    from imagegen.model.upscalers.upscaler import load_model_upscaler

    torch.set_num_threads(args.threads)
    resident = resident_weights = 0
    if variant == "resident" and args.resident is not None:
        resident, resident_weights = load_resident(args.resident)
    upscaler = load_model_upscaler(args.weights)  # the service's loader, the file as people have
    net = upscaler.net
    pixels = picture(size)
    weights = sum(p.numel() * p.element_size() for p in net.parameters())
    with torch.inference_mode():  # warm the kernels on a small piece
        net(torch.rand(1, 3, 16, 16))
    rss_before = common.proc_status_bytes("VmRSS")
    if budget == AUTO:  # what the service gives an upscale beside this model
        scaled = (size * net.shape.scale, size * net.shape.scale)
        budget = tile_budget(0, resident_weights, held_bytes([upscaler], (size, size), scaled))
    elif budget < 0:  # what the target leaves for the tiles beside what is resident now
        budget = int(args.resident_target * (resident + weights)) - rss_before
    if variant == "one_pass":
        side, tiles, computed = size, 1, size * size
    else:
        side = upscaler._side(size, size, budget)  # the service's tile_count
        plan = plan_tiles(width=size, height=size, side=side, margin=upscaler.margin)
        tiles = len(plan)
        computed = sum((t.run_bottom - t.run_top) * (t.run_right - t.run_left) for t in plan)
    start_anon = common.proc_status_bytes("RssAnon")
    peak = common.PeakMemory()
    started = time.perf_counter()
    if variant == "one_pass":
        result = run_one_pass(net, pixels)
        seconds = time.perf_counter() - started
    else:  # as a job: the upscale, then its PNG (inside the peak, outside the seconds)
        image = upscaler.upscale(
            Image.fromarray(pixels), scale=net.shape.scale, budget_bytes=budget
        )
        seconds = time.perf_counter() - started
        image.save(io.BytesIO(), format="PNG")
    peaks = peak.stop()
    if variant != "one_pass":
        result = np.asarray(image)
    np.save(out, result)
    return {
        "budget_bytes": 0 if variant == "one_pass" else budget,
        "seconds": seconds,
        "tiles": tiles,
        "tile_side": side,
        "computed_pixels": computed,
        "peak_anon_over_start_bytes": peaks["peak_anon_bytes"] - start_anon,
        "weights_bytes": weights,
        "resident_model_bytes": resident,
        "rss_before_bytes": rss_before,
        "peak_during_bytes": peaks["peak_anon_bytes"] + peaks["peak_file_bytes"],
    }


def run_as_child(args: argparse.Namespace) -> int:
    variant, size, budget, out = args.child
    common.emit_child_result(measure(variant, int(size), int(budget), args, Path(out)))
    return 0


def measure_variant(
    variant: str, size: int, budget: int, args: argparse.Namespace, work: Path
) -> Run:
    out = work / f"{variant}-{size}-{budget}.npy"
    if args.quick:  # in process: the smoke run starts no process
        result = measure(variant, size, budget, args, out)
        result["peak_rss_bytes"] = common.proc_status_bytes("VmHWM")
    else:
        result = common.run_child(
            SCRIPT,
            [variant, str(size), str(budget), str(out), "--threads", str(args.threads),
             "--margin", str(args.margin), "--weights", str(args.weights),
             "--resident-target", str(args.resident_target)]
            + (["--resident", str(args.resident)] if args.resident else []),
            work / f"{variant}-{size}.log", timeout=4 * 3600, env={},
        )  # fmt: skip
    row = Run(variant=variant, size=size, **result)
    print(
        f"  {variant:<8} {size}x{size}: {row.seconds:.1f} s | {row.tiles} tiles of "
        f"{row.tile_side} | computed {row.computed_pixels / size**2:.2f}x the pixels | "
        f"{row.seconds / row.computed_pixels * 1e6:.1f} us a computed pixel | RSS before "
        f"{row.rss_before_bytes / GIB:.2f} GiB, peak during {row.peak_during_bytes / GIB:.2f} "
        f"GiB (+{row.peak_anon_over_start_bytes / GIB:.2f} GiB during the upscale) | load "
        f"{common.load_average()}",
        flush=True,
    )
    return row


def one_pass_size(args: argparse.Namespace) -> int:
    """The size the one pass runs at: --size where its activations fit in the memory free
    now with HEADROOM to spare, else --compare-size."""
    from imagegen.model.upscalers.rrdbnet import RRDBShape
    from imagegen.model.upscalers.tiles import bytes_per_pixel

    shape = RRDBShape(3, 3, upsamples=2, **(QUICK if args.quick else FULL))
    needed = bytes_per_pixel(shape) * args.size**2
    fits = needed + HEADROOM <= common.mem_available_bytes()
    return args.size if fits or args.quick else args.compare_size


def difference(first: Path, second: Path) -> int:
    import numpy as np

    return int(np.abs(np.load(first).astype(int) - np.load(second)).max())


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024, help="the picture's side (1024)")
    parser.add_argument(
        "--compare-size", type=int, default=512, help="the side when --size does not fit (512)"
    )
    parser.add_argument(
        "--budget", type=budget_bytes, default=None,
        help="tile memory budget, bytes, or auto: the service's rule (auto; 10 MiB with --quick)",
    )  # fmt: skip
    parser.add_argument(
        "--margin", type=int, help="tile margin, input pixels (the service's default)"
    )
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count() or 1, help="torch threads (nproc)"
    )
    parser.add_argument(
        "--resident",
        type=Path,
        help="a diffusers repo held during upscales (full-size SD 1.5; none with --quick)",
    )
    parser.add_argument(
        "--resident-target", type=float, default=1.1,
        help="peak over the model's resident size plus the upscaler's, to size a budget (1.1)",
    )  # fmt: skip
    parser.add_argument(
        "--quick", action="store_true", help="a tiny network at 96x96, in process, 1 thread"
    )
    parser.add_argument(
        "--one-pass-last", action="store_true", help="the one pass after the tiled runs"
    )
    parser.add_argument(
        "--target", action=argparse.BooleanOptionalAction, default=True,
        help="also the run at the budget the peak target leaves, beside a resident model (yes)",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, help="where to write results")
    parser.add_argument("--weights", type=Path, help=argparse.SUPPRESS)
    parser.add_argument(
        "--child", nargs=4, metavar=("VARIANT", "SIZE", "BUDGET", "OUT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.budget is None:
        args.budget = 10 * MIB if args.quick else AUTO  # quick: 96x96 in nine tiles
    if args.quick:
        args.size, args.compare_size, args.threads = 96, 96, 1
    elif args.resident is None:
        args.resident = RESIDENT
    if args.margin is None:
        from imagegen.model.upscalers.tiles import DEFAULT_MARGIN

        args.margin = DEFAULT_MARGIN
    return args


def budget_bytes(text: str) -> int:
    """--budget: bytes, or `auto` (AUTO)."""
    return AUTO if text == "auto" else int(text)


def budget_text(budget: int) -> str:
    return "auto (the service's rule)" if budget == AUTO else f"{budget / MIB:.0f} MiB"


def run(args: argparse.Namespace) -> int:
    machine = common.machine_info()
    common.print_machine(machine, f"torch threads {args.threads}")
    size = one_pass_size(args)
    sizes = QUICK if args.quick else FULL
    print(
        f"network: RRDBNet x4, {sizes['blocks']} blocks, {sizes['features']} features, "
        f"{sizes['growth']} growth, random weights in Real-ESRGAN's layout | {size}x{size}"
        f"{'' if size == args.size else f' (one pass at {args.size} does not fit)'}"
        f" | budget {budget_text(args.budget)}, margin {args.margin} | resident: "
        f"{args.resident or 'none'}{' | quick, in process' if args.quick else ''}",
        flush=True,
    )  # fmt: skip
    work = scratch_dir("upscale-bench-")
    try:
        args.weights = save_network(args.quick, work / "RealESRGAN_x4plus-random.pth")
        if not args.quick:  # the first touch of fresh guest memory is slow: not any variant's
            from imagegen.model.upscalers.rrdbnet import RRDBShape
            from imagegen.model.upscalers.tiles import bytes_per_pixel

            wanted = bytes_per_pixel(RRDBShape(3, 3, upsamples=2, **sizes)) * size**2
            primed = common.prime_size(wanted)
            print(
                f"  primed {primed / GIB:.1f} GiB of memory in {common.prime_memory(primed):.1f} s"
            )
        # The service's path at the budget given: beside the resident model where there is one
        # (the time is the same; the peak is the one that counts), then at the target's budget.
        served = "resident" if args.resident is not None else "service"
        plan = [("one_pass", 0), (served, args.budget)]
        if args.resident is not None and args.target:
            plan.append(("resident", -1))
        if args.one_pass_last:  # the other order, to see what the load's drift did
            plan = plan[1:] + plan[:1]
        runs = [measure_variant(variant, size, budget, args, work) for variant, budget in plan]
        runs.sort(key=lambda r: (r.variant != "one_pass", r.budget_bytes < args.budget))
        plain, service = runs[0], runs[1]
        worst = difference(
            work / f"{served}-{size}-{args.budget}.npy", work / f"one_pass-{size}-0.npy"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    per_pixel = plain.seconds / plain.computed_pixels
    common.print_table(
        [("variant", 9), ("side", 5), ("s", 7), ("vs plain", 8), ("budget MiB", 10),
         ("tiles", 6), ("computed", 9), ("s/pixel", 8), ("peak GiB", 9), ("+ GiB", 7),
         ("peak/(model+net)", 17), ("what", 0)],
        [[r.variant, str(r.size), f"{r.seconds:.1f}", fmt_ratio(ratio(r.seconds, plain.seconds)),
          f"{r.budget_bytes / MIB:.0f}", f"{r.tiles} x {r.tile_side}",
          f"{r.computed_pixels / r.size**2:.2f}x",
          fmt_ratio(ratio(r.seconds / r.computed_pixels, per_pixel)),
          f"{r.peak_during_bytes / GIB:.2f}", f"{r.peak_anon_over_start_bytes / GIB:.2f}",
          fmt_ratio(ratio(r.peak_during_bytes, r.resident_model_bytes + r.weights_bytes))
          if r.resident_model_bytes else "-",
          "the network called once on the picture" if r.variant == "one_pass"
          else "the service's ModelUpscaler.upscale" + (" beside a resident model"
                                                        if r.resident_model_bytes else "")]
         for r in runs],
    )  # fmt: skip
    summary = (
        f"summary: ESRGAN x4 ({sizes['blocks']} blocks) at {size}x{size}, {args.threads} "
        f"threads: service {service.seconds:.1f} s = "
        f"{fmt_ratio(ratio(service.seconds, plain.seconds))} one pass ({plain.seconds:.1f} s), "
        f"computing {service.computed_pixels / size**2:.2f}x the pixels; peak during "
        f"{service.peak_during_bytes / GIB:.2f} vs {plain.peak_during_bytes / GIB:.2f} GiB; "
        f"max pixel difference {worst}/255"
    )
    document = {
        "config": {
            "size": args.size, "compared_at": size,
            "budget_bytes": "auto" if args.budget == AUTO else args.budget,
            "margin": args.margin, "threads": args.threads, "quick": args.quick,
            "seed": SEED, "network": sizes, "resident": str(args.resident or ""),
            "resident_target": args.resident_target,
        },
        "runs": [asdict(r) for r in runs],
        "max_pixel_difference": worst,
        "ratios": {
            "service_vs_one_pass_seconds": ratio(service.seconds, plain.seconds),
            "service_computed_pixels": service.computed_pixels / size**2,
            "service_vs_one_pass_seconds_per_computed_pixel": ratio(
                service.seconds / service.computed_pixels, per_pixel),
            "service_vs_one_pass_peak": ratio(service.peak_during_bytes, plain.peak_during_bytes),
            "resident_peak_over_model_plus_upscaler": [
                ratio(r.peak_during_bytes, r.resident_model_bytes + r.weights_bytes)
                for r in runs if r.resident_model_bytes],
        },
    }  # fmt: skip
    common.finish("upscale", machine, document, summary, args.json)
    return 0


def main(argv: list[str] | None = None) -> int:
    return common.main(parse_args, run, run_as_child, argv)


if __name__ == "__main__":
    sys.exit(main())
