"""Swap benchmark: the service changing its resident model, SDXL to SD 1.5 and back, beside
plain diffusers doing the same by hand, in the same run.

Why it exists: with MODELS offered under a memory limit that holds one of them (the 16 GiB
reference container holds one SDXL at fp32), a request for the other model frees the resident
one and loads its own from the share. That swap is part of the request's time, and its peak
decides whether the container survives it. One run measures, on full-size random-weight repos
(bench/model_fixture.py) placed on a share as a pull leaves them:

- the service: one process's ModelShelf (imagegen.model.shelf) over the two models' loaders
  under a 16 GiB limit, as imagegen.backend builds it. SDXL is loaded first; then SD 1.5 is
  asked for (the shelf frees SDXL, then loads SD 1.5), then SDXL again. Each swap is timed
  from the ask to the model resident;
- plain diffusers, in its own process: `from_pretrained(variant="fp16", dtype=float32)` of
  SDXL, then for each swap the freeing a script does (`del pipe; gc.collect()`) and
  `from_pretrained` of the incoming model, the two timed apart and added.

Each swap's peak RSS (VmHWM, reset through /proc/self/clear_refs before it) is set beside
the RSS of the larger model alone (SDXL resident, nothing else, in the same process) and
the fp32 bytes of the weights. The incoming model's files are read once before each load,
on both sides, so both start from a warm page cache. Targets (issue): a swap <= 1.0x plain's
load of the incoming model plus the freeing; the swap's peak <= 1.1x the larger model alone.

    flock /tmp/fullsize-bench.lock .venv/bin/python bench/swap_bench.py   # ~5 min on 2 vCPU
    .venv/bin/python bench/swap_bench.py --smoke   # the tests' tiny model, two ids, in process
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from bench.common import GIB, fmt_ratio, ratio  # noqa: E402
from bench.model_fixture import (  # noqa: E402
    ensure_model,
    fp32_bytes,
    place_on_share,
    scratch_dir,
    spec_for,
    weight_files,
)

SCRIPT = Path(__file__).resolve()
LIMIT = 16 * GIB  # the reference container's memory: one SDXL at fp32, not SDXL and SD 1.5
LARGE, SMALL = "sdxl", "sd15"
# The smoke run: the tests' tiny SD under two ids, the limit below one model.
SMOKE_IDS = {LARGE: "bench/tiny-large", SMALL: "bench/tiny-small"}
SWAPS = ((LARGE, SMALL), (SMALL, LARGE))  # (from, to): SDXL -> SD 1.5 -> SDXL


def reset_peak() -> None:
    """Restarts VmHWM from the current RSS (Linux: clear_refs 5)."""
    Path("/proc/self/clear_refs").write_text("5")


def warm(path: Path) -> None:
    common.read_files(weight_files(path))


def service_swaps(share: Path, ids: dict[str, str], paths: dict[str, Path], limit: int | None):
    """The shelf's swaps in this process: the first load, then each of SWAPS."""
    from imagegen.model.hub import ModelSource
    from imagegen.model.loader import ModelLoader
    from imagegen.model.shelf import ModelShelf

    cache = share.parent / "download-cache"
    loaders = {
        name: ModelLoader(
            ModelSource(model_id=repo, revision="main", variant="fp16", model_dir=share,
                        cache_dir=cache, endpoint="http://127.0.0.1:9"),
            "cpu",
        )
        for name, repo in ids.items()
    }  # fmt: skip
    shelf = ModelShelf(loaders.values(), limit)

    def ask(name: str) -> float:
        warm(paths[name])
        started = time.perf_counter()
        shelf.loader(ids[name]).pipeline(timeout=3600)
        return time.perf_counter() - started

    reset_peak()
    first = ask(LARGE)
    alone = common.proc_status_bytes("VmRSS")
    swaps = []
    for source, target in SWAPS:
        reset_peak()
        seconds = ask(target)
        assert shelf.resident() == [ids[target]], shelf.resident()
        swaps.append({
            "from": source, "to": target, "seconds": seconds,
            "peak_rss_bytes": common.proc_status_bytes("VmHWM"),
            "rss_after_bytes": common.proc_status_bytes("VmRSS"),
        })  # fmt: skip
    return {"first_load_seconds": first, "large_alone_rss_bytes": alone, "swaps": swaps}


def plain_swaps(paths: dict[str, Path]) -> dict[str, Any]:
    """The same swaps as a script does them with plain diffusers."""
    import torch
    from diffusers import DiffusionPipeline

    def load(name: str) -> tuple[Any, float]:
        warm(paths[name])
        started = time.perf_counter()
        pipe = DiffusionPipeline.from_pretrained(paths[name], variant="fp16", dtype=torch.float32)
        return pipe, time.perf_counter() - started

    reset_peak()
    pipe, first = load(LARGE)
    alone = common.proc_status_bytes("VmRSS")
    swaps = []
    for source, target in SWAPS:
        reset_peak()
        started = time.perf_counter()
        del pipe
        gc.collect()
        freeing = time.perf_counter() - started
        pipe, loading = load(target)
        swaps.append({
            "from": source, "to": target, "seconds": freeing + loading,
            "free_seconds": freeing, "load_seconds": loading,
            "peak_rss_bytes": common.proc_status_bytes("VmHWM"),
            "rss_after_bytes": common.proc_status_bytes("VmRSS"),
        })  # fmt: skip
    del pipe
    return {"first_load_seconds": first, "large_alone_rss_bytes": alone, "swaps": swaps}


def import_libraries() -> None:
    """What a load uses, imported before any clock starts, on both sides."""
    import diffusers
    import transformers

    diffusers.StableDiffusionXLPipeline, diffusers.StableDiffusionPipeline  # noqa: B018
    transformers.CLIPTextModel, transformers.CLIPTextModelWithProjection  # noqa: B018


def child(args: argparse.Namespace) -> int:
    from imagegen.model.malloc_arena import use_one_arena

    import_libraries()
    variant, share = args.child[0], Path(args.child[1])
    paths = {name: spec_for(name).path for name in (LARGE, SMALL)}
    if variant == "service":
        use_one_arena()  # as the service's processes do (gunicorn's worker, manage.py)
        ids = {name: spec_for(name).repo_id for name in (LARGE, SMALL)}
        result = service_swaps(share, ids, paths, LIMIT)
    else:
        result = plain_swaps(paths)
    common.emit_child_result(result)
    return 0


def smoke(work: Path) -> dict[str, dict[str, Any]]:
    """Both sides in this process on the tiny model under two ids: no child, no 10 GB."""
    tiny = ensure_model("tiny")
    share = work / "share"
    for repo in SMOKE_IDS.values():
        place_on_share("tiny", share, repo_id=repo, source=tiny)
    paths = {name: tiny for name in SMOKE_IDS}
    import_libraries()
    service = service_swaps(share, SMOKE_IDS, paths, limit=1)
    gc.collect()
    return {"service": service, "plain": plain_swaps(paths)}


def full(work: Path) -> dict[str, dict[str, Any]]:
    share = work / "share"
    for name in (LARGE, SMALL):
        place_on_share(name, share)
    results = {}
    for variant in ("plain", "service"):
        results[variant] = common.run_child(
            SCRIPT, [variant, str(share)], work / f"{variant}.log", timeout=3600, env={}
        )
        print(f"  {variant}: {summary_line(results[variant])}", flush=True)
        libc_trim()
    return results


def libc_trim() -> None:
    """This process holds nothing big, but give back what it can before the next child."""
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def summary_line(result: dict[str, Any]) -> str:
    parts = [f"first load {result['first_load_seconds']:.1f} s"]
    for swap in result["swaps"]:
        parts.append(
            f"{swap['from']}->{swap['to']} {swap['seconds']:.1f} s, peak "
            f"{swap['peak_rss_bytes'] / GIB:.2f} GiB"
        )
    return "; ".join(parts)


def rows_for(results: dict[str, dict[str, Any]], fp32: dict[str, int]) -> list[dict[str, Any]]:
    service, plain = results["service"], results["plain"]
    alone = service["large_alone_rss_bytes"]
    rows = []
    for mine, theirs in zip(service["swaps"], plain["swaps"], strict=True):
        rows.append({
            "swap": f"{mine['from']} -> {mine['to']}",
            "service_seconds": mine["seconds"],
            "plain_seconds": theirs["seconds"],
            "plain_free_seconds": theirs["free_seconds"],
            "plain_load_seconds": theirs["load_seconds"],
            "ratio": ratio(mine["seconds"], theirs["seconds"]),
            "service_peak_rss_bytes": mine["peak_rss_bytes"],
            "plain_peak_rss_bytes": theirs["peak_rss_bytes"],
            "peak_vs_large_alone": ratio(mine["peak_rss_bytes"], alone),
            "plain_peak_vs_large_alone": ratio(theirs["peak_rss_bytes"],
                                               plain["large_alone_rss_bytes"]),
            "peak_vs_large_fp32": ratio(mine["peak_rss_bytes"], fp32[LARGE]),
        })  # fmt: skip
    return rows


def print_rows(rows: list[dict[str, Any]]) -> None:
    columns = [("swap", 14), ("service s", 9), ("plain s", 8), ("ratio", 6), ("peak GiB", 8),
               ("/alone", 7), ("plain peak", 10), ("/alone", 7), ("", 0)]  # fmt: skip
    common.print_table(columns, [
        [r["swap"], f"{r['service_seconds']:.1f}", f"{r['plain_seconds']:.1f}",
         fmt_ratio(r["ratio"]), f"{r['service_peak_rss_bytes'] / GIB:.2f}",
         fmt_ratio(r["peak_vs_large_alone"]), f"{r['plain_peak_rss_bytes'] / GIB:.2f}",
         fmt_ratio(r["plain_peak_vs_large_alone"]),
         f"plain = free {r['plain_free_seconds']:.1f} s + load {r['plain_load_seconds']:.1f} s"]
        for r in rows
    ])  # fmt: skip


def verdicts(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in rows:
        time_ok = r["ratio"] is not None and r["ratio"] <= 1.0
        peak_ok = r["peak_vs_large_alone"] is not None and r["peak_vs_large_alone"] <= 1.1
        out.append(
            f"{r['swap']}: {fmt_ratio(r['ratio'])} plain (target <= 1.00x: "
            f"{'met' if time_ok else 'not met'}), peak {fmt_ratio(r['peak_vs_large_alone'])} "
            f"the larger model alone (target <= 1.10x: {'met' if peak_ok else 'not met'})"
        )
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
                        help="the tests' tiny model in this process: proves the run, measures "
                        "nothing")  # fmt: skip
    parser.add_argument("--force", action="store_true", help="run even if memory looks short")
    parser.add_argument("--json", type=Path, help="where to write results")
    parser.add_argument("--child", nargs=2, metavar=("VARIANT", "SHARE"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> int:
    machine = common.machine_info()
    common.print_machine(machine)
    names = ("tiny", "tiny") if args.smoke else (LARGE, SMALL)
    fp32 = {n: fp32_bytes(ensure_model(m)) for n, m in zip((LARGE, SMALL), names, strict=True)}
    if not args.smoke:
        common.check_memory(int(1.5 * fp32[LARGE]) + GIB, args.force)
    print(
        f"models: {LARGE} {fp32[LARGE] / GIB:.2f} GiB and {SMALL} {fp32[SMALL] / GIB:.2f} GiB "
        f"at fp32; limit {'1 byte' if args.smoke else f'{LIMIT / GIB:.0f} GiB'}: one at a time",
        flush=True,
    )
    work = scratch_dir("swap-bench-")
    try:
        results = smoke(work) if args.smoke else full(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = rows_for(results, fp32)
    print_rows(rows)
    lines = verdicts(rows)
    for line in lines:
        print(line)
    name = "tiny" if args.smoke else "sdxl_sd15"
    summary = "summary: swap " + " | ".join(lines)
    document = {"config": {"smoke": args.smoke, "limit": 1 if args.smoke else LIMIT},
                "fp32_bytes": fp32, "results": results, "rows": rows}  # fmt: skip
    common.finish(f"swap_{name}", machine, document, summary, args.json)
    return 0


def main(argv: list[str] | None = None) -> int:
    return common.main(parse_args, run, child, argv)


if __name__ == "__main__":
    sys.exit(main())
