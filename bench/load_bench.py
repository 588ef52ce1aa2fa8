"""Warm-load benchmark: the service's loader against plain diffusers and the physical floor.

Why it exists: a warm revision spends its start-up loading the pipeline from the share, and
its peak memory decides whether the model fits the 16 GiB host at all. One run measures, on
the same files (a full-size random-weight repo from bench/model_fixture.py, fp16 variant):

- the service: `imagegen.model.pipeline.load_pipeline(path, variant="fp16", device="cpu")`;
- the baseline: plain `DiffusionPipeline.from_pretrained(path, variant="fp16",
  dtype=torch.float32)`;
- the floor: reading the weight files' bytes (first "cold-ish" after asking the kernel to
  drop those files from the page cache with posix_fadvise(DONTNEED), which works without
  root but is only advice; then warm), plus `safetensors.torch.load_file` + `.float()` of
  the same tensors (the fp16 -> fp32 cast that any fp32 load must do).

Every load runs in a fresh child process that reports its own peak RSS (VmHWM, which also
counts mmapped file pages) and peak anonymous memory (RssAnon, sampled every 5 ms), right
after the weight files were read again (page cache warm whatever the previous load left:
the service's streaming loader drops the pages it read). Rounds are interleaved (each
round starts with the next variant) and the median is reported. Memory is given as a ratio
to the fp32 weight bytes (the issue's target: peak RSS <= 1.15x). Before the loads, this
process touches 1.5x that memory once, because on a microVM the first touch of guest
memory is far slower than reuse and would penalise whichever load ran first
(`--no-prime` skips it, to see that first-load cost).

    .venv/bin/python bench/load_bench.py                 # SD 1.5, 3 rounds, ~3 min on 2 cores
    .venv/bin/python bench/load_bench.py --quick         # 1 round
    .venv/bin/python bench/load_bench.py --smoke         # the tests' tiny SD, 1 round: tests/bench/
    .venv/bin/python bench/load_bench.py --model sdxl    # SDXL: ~7 GB cache, ~21 GiB free RAM
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from bench.common import GIB, fmt_ratio, median, ratio  # noqa: E402
from bench.model_fixture import (  # noqa: E402
    MODELS,
    ensure_model,
    fp32_bytes,
    scratch_dir,
    spec_for,
    weight_files,
)

SCRIPT = Path(__file__).resolve()
LOADERS = ("cast", "plain", "service")  # child variants, in the order each round runs them


@dataclass
class Row:
    name: str
    what: str
    seconds: float
    peak_rss_bytes: int | None = None
    peak_anon_bytes: int | None = None
    import_rss_bytes: int | None = None
    samples: list[float] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)


# --- children (one load each, in a fresh interpreter) -----------------------------------------


def child_service(path: Path) -> dict[str, Any]:
    from imagegen.model.pipeline import load_pipeline

    started = time.perf_counter()
    pipe = load_pipeline(path, variant="fp16", device="cpu")
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "unet_dtype": str(pipe.unet.dtype)}


def child_plain(path: Path) -> dict[str, Any]:
    import torch
    from diffusers import DiffusionPipeline

    started = time.perf_counter()
    pipe = DiffusionPipeline.from_pretrained(path, variant="fp16", dtype=torch.float32)
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "unet_dtype": str(pipe.unet.dtype)}


def child_cast(path: Path) -> dict[str, Any]:
    """load_file (read + deserialise fp16) then .float() of every tensor; the fp32 tensors
    are kept, as a loaded model keeps them, and each file's fp16 copy is dropped."""
    from safetensors.torch import load_file

    kept: list[dict[str, Any]] = []
    read_seconds = cast_seconds = 0.0
    for file in weight_files(path):
        started = time.perf_counter()
        half = load_file(file)
        loaded = time.perf_counter()
        kept.append({name: tensor.float() for name, tensor in half.items()})
        del half
        cast_seconds += time.perf_counter() - loaded
        read_seconds += loaded - started
    return {
        "seconds": read_seconds + cast_seconds,
        "load_file_seconds": read_seconds,
        "cast_seconds": cast_seconds,
        "tensors": sum(len(d) for d in kept),
    }


CHILDREN = {"service": child_service, "plain": child_plain, "cast": child_cast}


def import_libraries(model: str) -> None:
    """Imports what a load uses before the clock starts, so no variant pays for imports."""
    import diffusers
    import safetensors.torch  # noqa: F401
    import transformers

    getattr(diffusers, spec_for(model).pipeline_class)
    for name in ("CLIPTextModel", "CLIPTextModelWithProjection", "CLIPTokenizer"):
        getattr(transformers, name)


def run_as_child(variant: str, model: str) -> int:
    import torch

    import_libraries(model)
    import_rss = common.proc_status_bytes("VmRSS")
    memory = common.PeakMemory()
    result = CHILDREN[variant](spec_for(model).path)
    result |= memory.stop()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    result |= {
        "import_rss_bytes": import_rss,
        "torch_threads": torch.get_num_threads(),
        "user_seconds": usage.ru_utime,
        "system_seconds": usage.ru_stime,
        "minor_faults": usage.ru_minflt,
        "major_faults": usage.ru_majflt,
    }
    common.emit_child_result(result)
    return 0


# --- the floor: raw reads -------------------------------------------------------------------


def drop_from_page_cache(files: list[Path]) -> None:
    for file in files:
        fd = os.open(file, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident_fraction(files: list[Path]) -> float | None:
    """How much of the files is in the page cache, by util-linux fincore (None without it)."""
    if not shutil.which("fincore"):
        return None
    command = ["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES,SIZE"]
    try:
        out = subprocess.run(
            command + [str(f) for f in files], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    resident = size = 0
    for line in out.splitlines():
        res, total = line.split()
        resident, size = resident + int(res), size + int(total)
    return resident / size if size else None


def measure_reads(files: list[Path]) -> tuple[Row, Row]:
    drop_from_page_cache(files)
    before = resident_fraction(files)
    cold_seconds, total = common.read_files(files)
    warm_seconds, _ = common.read_files(files)
    cached = "unknown" if before is None else f"{before:.0%} cached before"
    cold = Row(
        "read cold-ish", f"first read after fadvise(DONTNEED), {cached}", cold_seconds,
        detail={"bytes": total, "resident_before": before, "mb_s": total / cold_seconds / 1e6},
    )  # fmt: skip
    warm = Row(
        "read warm", "second read, from the page cache", warm_seconds,
        detail={"bytes": total, "mb_s": total / warm_seconds / 1e6},
    )  # fmt: skip
    return cold, warm


# --- the run ------------------------------------------------------------------------------------


def load_in_child(variant: str, model: str, work: Path) -> dict[str, Any]:
    return common.run_child(
        SCRIPT, [variant, "--model", model], work / f"{variant}.log", timeout=1800, env={}
    )


def rotated(round_index: int) -> tuple[str, ...]:
    """Each round starts with the next variant, so over len(LOADERS) rounds every variant
    runs once in every position (order effects cancel out in the median)."""
    shift = round_index % len(LOADERS)
    return LOADERS[shift:] + LOADERS[:shift]


def measure_loaders(
    model: str, rounds: int, prime: bool, files: list[Path], work: Path
) -> dict[str, Row]:
    if prime:
        size = common.prime_size(int(1.5 * fp32_bytes(spec_for(model).path)))
        seconds = common.prime_memory(size)
        print(f"  primed {size / GIB:.1f} GiB of memory in {seconds:.1f} s", flush=True)
    runs: dict[str, list[dict[str, Any]]] = {variant: [] for variant in LOADERS}
    for round_index in range(rounds):
        for variant in rotated(round_index):
            common.read_files(files)  # every load starts with the files in the page cache
            result = load_in_child(variant, model, work)
            runs[variant].append(result)
            print(
                f"  round {round_index + 1}/{rounds} {variant:<8} {result['seconds']:7.1f} s  "
                f"peak RSS {result['peak_rss_bytes'] / GIB:5.2f} GiB, anon "
                f"{result['peak_anon_bytes'] / GIB:5.2f} GiB "
                f"(imports {result['import_rss_bytes'] / GIB:4.2f} GiB; process user "
                f"{result['user_seconds']:.1f} s, sys {result['system_seconds']:.1f} s, "
                f"{result['minor_faults'] / 1e6:.2f} M minor faults, "
                f"{result['torch_threads']} torch threads)",
                flush=True,
            )
    return {variant: summarise(variant, results) for variant, results in runs.items()}


def summarise(variant: str, results: list[dict[str, Any]]) -> Row:
    what = {
        "service": "imagegen.model.pipeline.load_pipeline(variant=fp16, device=cpu)",
        "plain": "DiffusionPipeline.from_pretrained(variant=fp16, dtype=float32)",
        "cast": "safetensors load_file + .float(), fp32 kept",
    }[variant]
    detail: dict[str, Any] = {
        "torch_threads": results[-1]["torch_threads"],
        "user_seconds": median([r["user_seconds"] for r in results]),
        "system_seconds": median([r["system_seconds"] for r in results]),
        "minor_faults": median([r["minor_faults"] for r in results]),
    }
    if variant == "cast":
        detail["load_file_seconds"] = median([r["load_file_seconds"] for r in results])
        detail["cast_seconds"] = median([r["cast_seconds"] for r in results])
    return Row(
        name=variant,
        what=what,
        seconds=median([r["seconds"] for r in results]),
        peak_rss_bytes=int(median([r["peak_rss_bytes"] for r in results])),
        peak_anon_bytes=int(median([r["peak_anon_bytes"] for r in results])),
        import_rss_bytes=int(median([r["import_rss_bytes"] for r in results])),
        samples=[r["seconds"] for r in results],
        detail=detail,
    )


def gib(value: int | None) -> str:
    return "-" if value is None else f"{value / GIB:.2f}"


def print_table(rows: list[Row], fp32: int, plain: Row, floor: float) -> None:
    columns = [("variant", 18), ("seconds", 7), ("vs plain", 8), ("vs floor", 8)]
    columns += [("peak RSS", 8), ("/fp32", 6), ("anon", 6), ("/fp32", 6)]
    common.print_table([*columns, ("what (memory in GiB)", 0)], [
        [row.name, f"{row.seconds:.2f}", fmt_ratio(ratio(row.seconds, plain.seconds)),
         fmt_ratio(ratio(row.seconds, floor)), gib(row.peak_rss_bytes),
         fmt_ratio(ratio(row.peak_rss_bytes, fp32)), gib(row.peak_anon_bytes),
         fmt_ratio(ratio(row.peak_anon_bytes, fp32)), row.what]
        for row in rows
    ])  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="sd15", choices=sorted(MODELS))
    parser.add_argument("--rounds", type=int, help="loads per variant (3; 1 with --quick)")
    parser.add_argument(
        "--no-prime", action="store_true", help="skip touching the memory before the loads"
    )
    parser.add_argument("--force", action="store_true", help="run even if memory looks short")
    parser.add_argument("--quick", action="store_true", help="a smaller run")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the tests' tiny SD, one round, no priming: proves the run end to end in the "
        "least time, measures nothing",
    )
    parser.add_argument("--json", type=Path, help="where to write results")
    parser.add_argument("--child", nargs=1, metavar="VARIANT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke:
        args.model, args.quick, args.no_prime = "tiny", True, True
    args.rounds = args.rounds or (1 if args.quick else 3)
    if args.rounds < 1:
        parser.error("--rounds must be positive")
    return args


def run(args: argparse.Namespace) -> int:
    machine = common.machine_info()
    common.print_machine(machine)
    path = ensure_model(args.model)
    files = weight_files(path)
    fp16 = sum(f.stat().st_size for f in files)
    fp32 = fp32_bytes(path)
    common.check_memory(int(1.5 * fp32) + GIB, args.force)  # diffusers' load peaks ~1.45x
    print(
        f"model: {spec_for(args.model).repo_id} ({len(files)} weight files, "
        f"{fp16 / 1e9:.2f} GB fp16 on disk -> {fp32 / 1e9:.2f} GB = {fp32 / GIB:.2f} GiB "
        f"as fp32) | rounds {args.rounds}{' | quick' if args.quick else ''}"
    )
    print(
        "every load runs in a fresh process with the files in the page cache; peak RSS "
        "(VmHWM) includes mmapped file pages, anon is the process's own memory",
        flush=True,
    )
    work = scratch_dir("load-bench-")
    try:
        cold, warm = measure_reads(files)
        print(
            f"  read: cold-ish {cold.seconds:.2f} s ({cold.detail['mb_s']:.0f} MB/s, "
            f"{cold.what}), warm {warm.seconds:.2f} s ({warm.detail['mb_s']:.0f} MB/s)",
            flush=True,
        )
        loads = measure_loaders(args.model, args.rounds, not args.no_prime, files, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cast = loads["cast"]
    floor_seconds = warm.seconds + cast.detail["cast_seconds"]
    floor = Row(
        "floor: read + cast",
        "warm read + the cast part of load_file+.float()",
        floor_seconds,
    )
    rows = [cold, warm, cast, floor, loads["plain"], loads["service"]]
    print_table(rows, fp32, loads["plain"], floor_seconds)
    service, plain = loads["service"], loads["plain"]
    summary = (
        f"summary: {args.model} warm load: service {service.seconds:.1f} s = "
        f"{fmt_ratio(ratio(service.seconds, plain.seconds))} plain diffusers "
        f"({plain.seconds:.1f} s), {fmt_ratio(ratio(service.seconds, floor_seconds))} the "
        f"read+cast floor ({floor_seconds:.1f} s) | peak RSS / fp32 bytes: service "
        f"{fmt_ratio(ratio(service.peak_rss_bytes, fp32))} (anon "
        f"{fmt_ratio(ratio(service.peak_anon_bytes, fp32))}), plain "
        f"{fmt_ratio(ratio(plain.peak_rss_bytes, fp32))} (anon "
        f"{fmt_ratio(ratio(plain.peak_anon_bytes, fp32))}), cast floor "
        f"{fmt_ratio(ratio(cast.peak_rss_bytes, fp32))}"
    )
    document = {
        "config": {
            "model": args.model,
            "rounds": args.rounds,
            "primed": not args.no_prime,
            "quick": args.quick,
            "smoke": args.smoke,
        },
        "model": {
            "repo_id": spec_for(args.model).repo_id,
            "weight_files": [f.relative_to(path).as_posix() for f in files],
            "fp16_bytes": fp16,
            "fp32_bytes": fp32,
        },
        "results": [asdict(row) for row in rows],
        "ratios": {
            "service_vs_plain_seconds": ratio(service.seconds, plain.seconds),
            "service_vs_floor_seconds": ratio(service.seconds, floor_seconds),
            "service_peak_rss_vs_fp32": ratio(service.peak_rss_bytes, fp32),
            "plain_peak_rss_vs_fp32": ratio(plain.peak_rss_bytes, fp32),
            "cast_peak_rss_vs_fp32": ratio(cast.peak_rss_bytes, fp32),
            "service_peak_anon_vs_fp32": ratio(service.peak_anon_bytes, fp32),
            "plain_peak_anon_vs_fp32": ratio(plain.peak_anon_bytes, fp32),
        },
    }
    common.finish(f"load_{args.model}", machine, document, summary, args.json)
    return 0


def main(argv: list[str] | None = None) -> int:
    return common.main(parse_args, run, lambda args: run_as_child(args.child[0], args.model), argv)


if __name__ == "__main__":
    sys.exit(main())
