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
gives the time and memory cost of that setting in the same run. A fourth, `service_thread`,
decodes the service's VAE on a long-lived thread of its own that lowered its priority by
GEN_NICE first, as the service's generation thread does (imagegen.generation.jobs: no
torch.set_num_threads, malloc_trim or gc call of its own between jobs), where the others decode
on the main thread as plain diffusers does: it answers whether the thread the service
generates in makes its decode slower (each decode also counts its minor and major page faults,
of the decoding thread and of the whole process, for glibc's per-thread malloc arenas).

    flock /tmp/fullsize-bench.lock .venv/bin/python bench/decode_path_bench.py  # SDXL 1024x1024
    .venv/bin/python bench/decode_path_bench.py --side 512 --rounds 2 \
        --variants plain,service,service_thread                    # SDXL's VAE at 512x512
    .venv/bin/python bench/decode_path_bench.py --quick                    # SD 1.5, 256x256
"""

from __future__ import annotations

import argparse
import queue
import resource
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common, efficiency  # noqa: E402
from bench.common import GIB  # noqa: E402

VARIANTS = ("plain", "service", "service_256", "service_thread")


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
    vaes["service_thread"] = vaes["service"]  # the same VAE, decoded on another thread
    return vaes


class GenerationThread:
    """A thread that runs what it is given one call at a time, started as the service starts
    its generation thread (imagegen.generation.jobs.JobQueue._work): it lowers its own priority
    by `nice` before its first torch call, then waits for work for as long as it lives."""

    def __init__(self, nice: int) -> None:
        from imagegen.generation.priority import lower_this_thread

        self._work: queue.Queue[Callable[[], Any]] = queue.Queue()
        self._done: queue.Queue[tuple[Any, BaseException | None]] = queue.Queue()

        def serve() -> None:
            lower_this_thread(nice)
            while True:
                call = self._work.get()
                try:
                    self._done.put((call(), None))
                except BaseException as exc:  # handed to the caller, raised there
                    self._done.put((None, exc))

        self.thread = threading.Thread(target=serve, name="generation", daemon=True)
        self.thread.start()

    def run(self, call: Callable[[], Any]) -> Any:
        self._work.put(call)
        result, exc = self._done.get()
        if exc is not None:
            raise exc
        return result


class _PipeOf:
    """What stop_points reads of a pipeline: its VAE (no UNet here)."""

    def __init__(self, vae: Any) -> None:
        self.vae = vae


def decode_once(vae: Any, latents: Any) -> dict[str, float]:
    """One decode as the render runs it, on the calling thread: seconds, CPU seconds (of the
    process), peak above RSS before, and the page faults taken meanwhile by this thread and
    by the process (torch's worker threads included)."""
    import contextlib

    import torch

    Path("/proc/self/clear_refs").write_text("5")
    rss = common.proc_status_bytes("VmRSS")
    points = getattr(vae, "_bench_points", None)
    watch = points.watching(lambda: None) if points else contextlib.nullcontext()
    thread, process = (
        resource.getrusage(w) for w in (resource.RUSAGE_THREAD, resource.RUSAGE_SELF)
    )
    cpu, began = time.process_time(), time.perf_counter()
    with torch.inference_mode(), watch:
        vae.decode(latents / vae.config.scaling_factor, return_dict=False)
    seconds = time.perf_counter() - began
    cpu = time.process_time() - cpu
    thread_after, process_after = (
        resource.getrusage(w) for w in (resource.RUSAGE_THREAD, resource.RUSAGE_SELF)
    )
    return {"seconds": seconds, "cpu": cpu,
            "peak_above_bytes": common.proc_status_bytes("VmHWM") - rss,
            "thread_minflt": thread_after.ru_minflt - thread.ru_minflt,
            "thread_majflt": thread_after.ru_majflt - thread.ru_majflt,
            "process_minflt": process_after.ru_minflt - process.ru_minflt,
            "process_majflt": process_after.ru_majflt - process.ru_majflt,
            "thread": threading.current_thread().name,
            "torch_threads": torch.get_num_threads()}  # fmt: skip


def run(args: argparse.Namespace) -> int:
    import torch

    from bench.model_fixture import VARIANT, ensure_model

    torch.set_num_threads(args.threads)
    model = "sd15" if args.quick else args.model
    side = 256 if args.quick else args.side or {"sd15": 512, "sdxl": 1024}[model]
    variants = tuple(args.variants.split(","))
    if unknown := set(variants) - set(VARIANTS):
        raise SystemExit(f"--variants: {sorted(unknown)} are not among {', '.join(VARIANTS)}")
    path = ensure_model(model)
    machine = common.machine_info()
    common.print_machine(machine, f"torch threads {args.threads}")
    flops = {name: efficiency.count_decode(path, side, 256 if name == "service_256" else args.tile)
             for name in variants}  # fmt: skip
    whole = efficiency.count_decode(path, side, 0)
    print(f"{model} VAE decode at {side}x{side}: whole {whole / 1e12:.2f} TFLOP; in tiles of "
          f"{args.tile} {efficiency.count_decode(path, side, args.tile) / 1e12:.2f}, of 256 "
          f"{efficiency.count_decode(path, side, 256) / 1e12:.2f}", flush=True)  # fmt: skip
    peak = efficiency.measure_peak(args.threads, repeats=2 if args.quick else 3)
    print("  " + efficiency.describe_peak(peak), flush=True)
    vaes = build_vaes(path, VARIANT, args.tile)
    generation = GenerationThread(args.nice)
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
    turns = [*variants, *reversed(variants)] * args.rounds
    if args.quick:
        turns = list(variants)
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for name in turns:
        vae = vaes[name]
        if name == "service_thread":
            result = generation.run(lambda vae=vae: decode_once(vae, latents))
        else:
            result = decode_once(vae, latents)
        result |= {"load": common.load_average()}
        results[name].append(result)
        print(
            f"  {name:<14} {result['seconds']:6.1f} s  CPU {result['cpu']:6.1f} s  peak above "
            f"{result['peak_above_bytes'] / GIB:5.2f} GiB  minor faults thread "
            f"{result['thread_minflt']:>7} process {result['process_minflt']:>7}  major "
            f"{result['process_majflt']}  on {result['thread']} ({result['torch_threads']} torch "
            f"threads)  load {result['load']}",
            flush=True,
        )
    rows = summarise(results, flops, peak)
    print_rows(rows)
    head = f"summary: {model} {side}x{side} decode, best of {len(results[variants[0]])}: "
    summary = head + "; ".join(
        compare(rows, name, base)
        for name, base in (("service", "plain"), ("service_256", "service"),
                           ("service_thread", "service"), ("service_thread", "plain"))
        if name in rows and base in rows
    )  # fmt: skip
    document = {
        "machine": machine | {"load_average_at_end": common.load_average()},
        "config": {
            "model": model,
            "side": side,
            "tile": args.tile,
            "threads": args.threads,
            "rounds": args.rounds,
            "nice": args.nice,
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


def compare(rows: dict[str, dict[str, float]], name: str, base: str) -> str:
    """One variant's best against another's: time, CPU seconds, minor page faults."""
    a, b = rows[name], rows[base]
    return (
        f"{name} {a['best_seconds']:.1f} s / {base} {b['best_seconds']:.1f} s = "
        f"{a['best_seconds'] / b['best_seconds']:.2f}x (CPU {a['best_cpu'] / b['best_cpu']:.2f}x, "
        f"minor faults {a['minflt']:.0f} / {b['minflt']:.0f}, peak "
        f"{a['peak_above_bytes'] / GIB:.2f} / {b['peak_above_bytes'] / GIB:.2f} GiB)"
    )


def summarise(
    results: dict[str, list[dict[str, Any]]], flops: dict[str, float], peak: efficiency.Peak
) -> dict[str, dict[str, float]]:
    """Per variant: its best and median seconds, the CPU seconds of its best, its largest
    peak, the median of its decodes' minor page faults (the process's), and the achieved
    FLOP/s of its best against the run's measured peak."""
    rows = {}
    for name, decodes in results.items():
        best = min(decodes, key=lambda d: d["seconds"])
        achieved, share = efficiency.fraction(flops[name], best["seconds"], peak)
        rows[name] = {
            "tflop": flops[name] / 1e12, "best_seconds": best["seconds"],
            "median_seconds": common.median([d["seconds"] for d in decodes]),
            "best_cpu": best["cpu"],
            "peak_above_bytes": max(d["peak_above_bytes"] for d in decodes),
            "minflt": common.median([d.get("process_minflt", 0) for d in decodes]),
            "gflops": achieved / 1e9, "of_peak": share,
        }  # fmt: skip
    return rows


def print_rows(rows: dict[str, dict[str, float]]) -> None:
    header = (f"{'variant':<14} {'TFLOP':>6} {'best s':>7} {'median s':>8} {'CPU s':>6} "
              f"{'peak GiB':>8} {'minflt':>8} {'GFLOP/s':>8} {'of peak':>7}")  # fmt: skip
    print("\n" + header + "\n" + "-" * len(header))
    for name, row in rows.items():
        print(f"{name:<14} {row['tflop']:>6.2f} {row['best_seconds']:>7.1f} "
              f"{row['median_seconds']:>8.1f} {row['best_cpu']:>6.1f} "
              f"{row['peak_above_bytes'] / GIB:>8.2f} {row['minflt']:>8.0f} {row['gflops']:>8.0f} "
              f"{row['of_peak']:>7.0%}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="sdxl", choices=["sd15", "sdxl"])
    parser.add_argument("--side", type=int, help="image side (sd15: 512, sdxl: 1024)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="which, comma-separated")
    parser.add_argument("--nice", type=int, default=10, help="service_thread's GEN_NICE (10)")
    parser.add_argument("--tile", type=int, default=512, help="VAE_TILE_SIZE (512: its default)")
    parser.add_argument("--rounds", type=int, default=1, help="each a turn there and back (1)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (2)")
    parser.add_argument("--quick", action="store_true", help="SD 1.5 at 256x256: a smoke run")
    parser.add_argument("--json", type=Path, help="where to write results")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
