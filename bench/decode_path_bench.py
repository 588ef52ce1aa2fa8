"""Decode-path benchmark: the full VAE's decode of one image as the service builds it beside
plain diffusers', in one process, in turns: seconds, CPU seconds, peak memory above the
loaded VAEs, and achieved FLOP/s against this run's measured peak.

Why it exists: in some time-to-image runs the service's full decode took 55-68 s where plain
diffusers' took 42-55 s (docs/performance.md), a question of the machine or the code. What
can differ in the code is all here: the service's VAE is built by its own loader
(imagegen.model.weights: every tensor a view into one fp32 block), tiled by VAE_TILE_SIZE
(imagegen.model.pipeline.decode_in_tiles_of), with the stop points' hooks on the decoder
watched by a check (imagegen.generation.stop_points), and decoded under inference mode as
imagegen.generation.render runs it; plain diffusers' VAE comes from `from_pretrained` with
the same tiles. Attention and upcasting cannot differ: diffusers' attention slicing does not
reach an AutoencoderKL (it has no set_attention_slice), so both keep diffusers' default
processor, and both are fp32 (SDXL's force_upcast acts on fp16 VAEs only). The turns
(plain, service, then service, plain) let the machine's drift fall on both alike.

A third variant, the service's VAE in tiles of 256 (the docs' rule for a 16 GiB container),
gives the time and memory cost of that setting in the same run.

    flock /tmp/fullsize-bench.lock .venv/bin/python bench/decode_path_bench.py  # SDXL 1024x1024
    .venv/bin/python bench/decode_path_bench.py --quick                    # SD 1.5, 256x256
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common, efficiency  # noqa: E402
from bench.common import GIB  # noqa: E402

VARIANTS = ("plain", "service", "service_256")


def build_vaes(model_path: Path, variant: str | None, tile: int) -> dict[str, Any]:
    """The three VAEs: plain diffusers' and the service's (twice: tiles of `tile`, and 256)."""
    import torch
    from diffusers import AutoencoderKL

    from imagegen.generation.stop_points import StopPoints
    from imagegen.model.pipeline import decode_in_tiles_of
    from imagegen.model.weights import load_component

    plain = AutoencoderKL.from_pretrained(
        model_path, subfolder="vae", variant=variant, dtype=torch.float32
    )
    vaes = {"plain": plain}
    for name in ("service", "service_256"):
        vae = load_component(model_path, "vae", "diffusers", "AutoencoderKL",
                             variant=variant, dtype=torch.float32)  # fmt: skip
        assert vae is not None, "the service's loader gave the VAE back to diffusers"
        vaes[name] = vae
    for name, vae in vaes.items():
        vae.eval()
        vae.enable_slicing()
        vae.enable_tiling()
        decode_in_tiles_of(vae, 256 if name == "service_256" else tile)
    for name in ("service", "service_256"):  # the render's stop points, watched
        vaes[name]._bench_points = StopPoints(_PipeOf(vaes[name]))
    return vaes


class _PipeOf:
    """What stop_points reads of a pipeline: its VAE (no UNet here)."""

    def __init__(self, vae: Any) -> None:
        self.vae = vae


def decode_once(vae: Any, latents: Any) -> dict[str, float]:
    """One decode as the render runs it: seconds, CPU seconds, peak above RSS before."""
    import contextlib

    import torch

    Path("/proc/self/clear_refs").write_text("5")
    rss = common.proc_status_bytes("VmRSS")
    points = getattr(vae, "_bench_points", None)
    watch = points.watching(lambda: None) if points else contextlib.nullcontext()
    cpu, began = time.process_time(), time.perf_counter()
    with torch.inference_mode(), watch:
        vae.decode(latents / vae.config.scaling_factor, return_dict=False)
    seconds = time.perf_counter() - began
    return {"seconds": seconds, "cpu": time.process_time() - cpu,
            "peak_above_bytes": common.proc_status_bytes("VmHWM") - rss}  # fmt: skip


def run(args: argparse.Namespace) -> int:
    import torch

    from bench.model_fixture import VARIANT, ensure_model

    torch.set_num_threads(args.threads)
    model = "sd15" if args.quick else args.model
    side = 256 if args.quick else {"sd15": 512, "sdxl": 1024}[model]
    path = ensure_model(model)
    machine = common.machine_info()
    common.print_machine(machine, f"torch threads {args.threads}")
    flops = {name: efficiency.count_decode(path, side, 256 if name == "service_256" else args.tile)
             for name in VARIANTS}  # fmt: skip
    whole = efficiency.count_decode(path, side, 0)
    print(f"{model} VAE decode at {side}x{side}: whole {whole / 1e12:.2f} TFLOP; in tiles of "
          f"{args.tile} {flops['plain'] / 1e12:.2f}, of 256 {flops['service_256'] / 1e12:.2f}",
          flush=True)  # fmt: skip
    peak = efficiency.measure_peak(args.threads, repeats=2 if args.quick else 3)
    print("  " + efficiency.describe_peak(peak), flush=True)
    vaes = build_vaes(path, VARIANT, args.tile)
    scale = 2 ** (len(vaes["plain"].config.block_out_channels) - 1)
    latents = torch.randn(1, vaes["plain"].config.latent_channels, side // scale,
                          side // scale, generator=torch.Generator().manual_seed(0))  # fmt: skip
    with torch.inference_mode():  # the same image from both: the code differs, not the maths
        same = (
            (
                vaes["plain"].decode(latents[..., :8, :8]).sample
                - vaes["service"].decode(latents[..., :8, :8]).sample
            )
            .abs()
            .max()
            .item()
        )
    turns = [*VARIANTS, *reversed(VARIANTS)] * args.rounds
    if args.quick:
        turns = list(VARIANTS)
    results: dict[str, list[dict[str, float]]] = {name: [] for name in VARIANTS}
    for name in turns:
        result = decode_once(vaes[name], latents) | {"load": common.load_average()}
        results[name].append(result)
        print(
            f"  {name:<12} {result['seconds']:6.1f} s  CPU {result['cpu']:6.1f} s  peak above "
            f"{result['peak_above_bytes'] / GIB:5.2f} GiB  load {result['load']}",
            flush=True,
        )
    rows = summarise(results, flops, peak)
    print_rows(rows)
    plain, service, small = (rows[n] for n in VARIANTS)
    summary = (
        f"summary: {model} {side}x{side} decode, best of {len(results['plain'])}: service "
        f"{service['best_seconds']:.1f} s / plain {plain['best_seconds']:.1f} s = "
        f"{service['best_seconds'] / plain['best_seconds']:.2f}x (CPU "
        f"{service['best_cpu'] / plain['best_cpu']:.2f}x); tiles of 256 "
        f"{small['best_seconds'] / service['best_seconds']:.2f}x the time of {args.tile}, peak "
        f"{small['peak_above_bytes'] / GIB:.2f} GiB against {service['peak_above_bytes'] / GIB:.2f}"
    )
    document = {
        "machine": machine | {"load_average_at_end": common.load_average()},
        "config": {
            "model": model,
            "side": side,
            "tile": args.tile,
            "threads": args.threads,
            "rounds": args.rounds,
            "turns": turns,
        },
        "whole_decode_flops": whole,
        "peak": peak.as_dict(),
        "max_abs_difference": same,
        "decodes": results,
        "rows": rows,
        "summary": summary,
    }
    print(f"  the same pixels: max |plain - service| {same:.1e} (an 8x8-latent decode)")
    print(f"\nresults written to {common.write_json('decode_path', document, args.json)}")
    print(summary)
    return 0


def summarise(
    results: dict[str, list[dict[str, float]]], flops: dict[str, float], peak: efficiency.Peak
) -> dict[str, dict[str, float]]:
    """Per variant: its best and median seconds, the CPU seconds of its best, its largest
    peak, and the achieved FLOP/s of its best against the run's measured peak."""
    rows = {}
    for name, decodes in results.items():
        best = min(decodes, key=lambda d: d["seconds"])
        achieved, share = efficiency.fraction(flops[name], best["seconds"], peak)
        rows[name] = {
            "tflop": flops[name] / 1e12, "best_seconds": best["seconds"],
            "median_seconds": common.median([d["seconds"] for d in decodes]),
            "best_cpu": best["cpu"],
            "peak_above_bytes": max(d["peak_above_bytes"] for d in decodes),
            "gflops": achieved / 1e9, "of_peak": share,
        }  # fmt: skip
    return rows


def print_rows(rows: dict[str, dict[str, float]]) -> None:
    header = (f"{'variant':<12} {'TFLOP':>6} {'best s':>7} {'median s':>8} {'CPU s':>6} "
              f"{'peak GiB':>8} {'GFLOP/s':>8} {'of peak':>7}")  # fmt: skip
    print("\n" + header + "\n" + "-" * len(header))
    for name, row in rows.items():
        print(f"{name:<12} {row['tflop']:>6.2f} {row['best_seconds']:>7.1f} "
              f"{row['median_seconds']:>8.1f} {row['best_cpu']:>6.1f} "
              f"{row['peak_above_bytes'] / GIB:>8.2f} {row['gflops']:>8.0f} "
              f"{row['of_peak']:>7.0%}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="sdxl", choices=["sd15", "sdxl"])
    parser.add_argument("--tile", type=int, default=512, help="VAE_TILE_SIZE (512: its default)")
    parser.add_argument("--rounds", type=int, default=1, help="each a turn there and back (1)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (2)")
    parser.add_argument("--quick", action="store_true", help="SD 1.5 at 256x256: a smoke run")
    parser.add_argument("--json", type=Path, help="where to write results")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
