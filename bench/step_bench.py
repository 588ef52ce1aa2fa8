"""Per-step latency benchmark: the service's pipeline as configured against plain diffusers.

Why it exists: on a CPU host nearly all of a generation is denoising steps (one UNet
forward of batch 2 per step with guidance on), so seconds per step is the figure the
service's knobs (attention slicing, VAE slicing and tiling, threads) move. One run
measures, on the same full-size random-weight repo (bench/model_fixture.py) at the same
size, steps, guidance, seed and torch thread count:

- the service: `imagegen.model.pipeline.load_pipeline` (attention slicing, VAE slicing + tiling);
- the baseline: plain `DiffusionPipeline.from_pretrained(variant="fp16", dtype=float32)`
  with diffusers' defaults (no slicing, no tiling).

Each variant runs in a fresh child process, called like the service calls it (under
`torch.inference_mode()`, a seeded CPU generator). A `callback_on_step_end` stamps every
step; the first step is a warm-up and excluded (it also pays for prompt encoding), the
median of the others is reported, beside the whole call including the VAE decode. Memory
is touched once before the children run (see bench.common.prime_memory).

    .venv/bin/python bench/step_bench.py                 # SD 1.5, 512x512, 3 steps (~5 min)
    .venv/bin/python bench/step_bench.py --quick         # SD 1.5, 256x256, 2 steps
    .venv/bin/python bench/step_bench.py --smoke         # the tests' tiny SD, 64x64: tests/bench/
    .venv/bin/python bench/step_bench.py --model sdxl    # SDXL 1024x1024, 3 steps: long, ~23 GiB
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
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
VARIANTS = ("service", "plain")
PROMPT = "a photo of an astronaut riding a horse on the sea at sunset, detailed"
NEGATIVE = "blurry, low quality"
SEED = 42
DEFAULT_SIZE = {"sd15": 512, "sdxl": 1024, "tiny": 128}
PRIME_FACTOR = 2.0  # memory touched before the children: weights plus room for activations
# SD 1.5's PNDM (PLMS) runs steps + 1 UNet calls; SDXL's Euler runs one per step.
DEFAULT_STEPS = {"sd15": 2, "sdxl": 3, "tiny": 2}


@dataclass
class Row:
    name: str
    what: str
    median_step_seconds: float
    step_seconds: list[float]
    first_step_seconds: float
    decode_seconds: float
    total_seconds: float
    load_seconds: float
    peak_rss_bytes: int
    torch_threads: int
    detail: dict[str, Any] = field(default_factory=dict)


# --- children ----------------------------------------------------------------------------------


def load(variant: str, path: Path) -> Any:
    import torch

    if variant == "service":
        from imagegen.model.pipeline import load_pipeline

        return load_pipeline(path, variant="fp16", device="cpu")
    from diffusers import DiffusionPipeline

    pipe = DiffusionPipeline.from_pretrained(path, variant="fp16", dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def generate_timed(pipe: Any, side: int, steps: int, guidance: float) -> dict[str, Any]:
    """One generation with a timestamp at the end of every step."""
    import torch

    stamps: list[float] = []

    def on_step_end(_pipe: Any, _step: int, _timestep: Any, kwargs: dict) -> dict:
        stamps.append(time.perf_counter())
        return kwargs

    started = time.perf_counter()
    with torch.inference_mode():
        image = pipe(
            prompt=PROMPT,
            negative_prompt=NEGATIVE,
            num_inference_steps=steps,
            guidance_scale=guidance,
            width=side,
            height=side,
            generator=torch.Generator("cpu").manual_seed(SEED),
            callback_on_step_end=on_step_end,
        ).images[0]
    finished = time.perf_counter()
    edges = [started, *stamps]
    return {
        "steps": [b - a for a, b in itertools.pairwise(edges)],
        "decode_seconds": finished - stamps[-1],
        "total_seconds": finished - started,
        "image_size": list(image.size),
    }


def run_as_child(variant: str, model: str, side: int, steps: int, guidance: float) -> int:
    import torch

    threads = int(os.environ["BENCH_TORCH_THREADS"])
    torch.set_num_threads(threads)
    started = time.perf_counter()
    pipe = load(variant, spec_for(model).path)
    load_seconds = time.perf_counter() - started
    result = generate_timed(pipe, side, steps, guidance)
    result |= {
        "load_seconds": load_seconds,
        "torch_threads": torch.get_num_threads(),
        "attention_processor": type(next(iter(pipe.unet.attn_processors.values()))).__name__,
        "vae_tiling": bool(getattr(pipe.vae, "use_tiling", False)),
        "vae_slicing": bool(getattr(pipe.vae, "use_slicing", False)),
    }
    common.emit_child_result(result)
    return 0


# --- the run -------------------------------------------------------------------------------------


def measure(variant: str, args: argparse.Namespace, work: Path) -> Row:
    result = common.run_child(
        SCRIPT,
        [variant, "--model", args.model, "--size", str(args.size), "--steps", str(args.steps),
         "--guidance", str(args.guidance)],
        work / f"{variant}.log",
        timeout=7200,
        env={"BENCH_TORCH_THREADS": str(args.threads)},
    )  # fmt: skip
    timed = result["steps"][1:]
    what = {
        "service": "load_pipeline: attention slicing, VAE slicing + tiling",
        "plain": "from_pretrained fp32, diffusers defaults",
    }[variant]
    row = Row(
        name=variant,
        what=what,
        median_step_seconds=median(timed),
        step_seconds=result["steps"],
        first_step_seconds=result["steps"][0],
        decode_seconds=result["decode_seconds"],
        total_seconds=result["total_seconds"],
        load_seconds=result["load_seconds"],
        peak_rss_bytes=result["peak_rss_bytes"],
        torch_threads=result["torch_threads"],
        detail={
            k: result[k] for k in ("attention_processor", "vae_tiling", "vae_slicing", "image_size")
        },
    )
    print(
        f"  {variant:<8} {len(row.step_seconds)} UNet calls "
        f"{' '.join(f'{s:.1f}' for s in row.step_seconds)} s | decode "
        f"{row.decode_seconds:.1f} s | total {row.total_seconds:.1f} s | load "
        f"{row.load_seconds:.1f} s | peak RSS {row.peak_rss_bytes / GIB:.2f} GiB | "
        f"{row.detail['attention_processor']}, {row.torch_threads} threads",
        flush=True,
    )
    return row


def print_table(rows: list[Row], plain: Row) -> None:
    names = ("variant", "s/step", "vs plain", "1st step", "decode s", "total s", "vs plain")
    columns = [(name, 8) for name in names] + [("peak GiB", 8), ("what", 0)]
    common.print_table(columns, [
        [r.name, f"{r.median_step_seconds:.2f}",
         fmt_ratio(ratio(r.median_step_seconds, plain.median_step_seconds)),
         f"{r.first_step_seconds:.2f}", f"{r.decode_seconds:.2f}", f"{r.total_seconds:.2f}",
         fmt_ratio(ratio(r.total_seconds, plain.total_seconds)), f"{r.peak_rss_bytes / GIB:.2f}",
         r.what]
        for r in rows
    ])  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="sd15", choices=sorted(MODELS))
    parser.add_argument(
        "--size", type=int, help="side in pixels (512 SD 1.5, 1024 SDXL; quick: half)"
    )
    parser.add_argument("--steps", type=int, help="denoising steps (SD 1.5 2, SDXL 3; quick 2)")
    parser.add_argument("--guidance", type=float, default=7.0, help="> 1: CFG on, batch 2 (7.0)")
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count() or 1, help="torch threads (nproc)"
    )
    parser.add_argument("--force", action="store_true", help="run even if memory looks short")
    parser.add_argument("--quick", action="store_true", help="a smaller run")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the tests' tiny SD at 64x64, 2 steps, 1 thread: proves the run end to end in "
        "the least time, measures nothing",
    )
    parser.add_argument("--json", type=Path, help="where to write results")
    parser.add_argument("--child", nargs=1, metavar="VARIANT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke:
        args.model, args.quick, args.threads = "tiny", True, 1
    native = DEFAULT_SIZE[args.model]
    args.size = args.size or (native // 2 if args.quick else native)
    args.steps = args.steps or (2 if args.quick else DEFAULT_STEPS[args.model])
    if args.steps < 2 or args.size % 8 or args.size < 64 or args.threads < 1:
        parser.error("--steps >= 2 (one is warm-up), --size a multiple of 8 >= 64, --threads >= 1")
    return args


def run(args: argparse.Namespace) -> int:
    machine = common.machine_info()
    common.print_machine(machine, f"torch threads {args.threads} (set in each child)")
    ensure_model(args.model)
    print(
        f"model: {spec_for(args.model).repo_id} | {args.size}x{args.size} | {args.steps} steps "
        f"(timed per UNet call; the first excluded) | guidance {args.guidance} "
        f"(CFG: batch 2) | seed {SEED}"
        f"{' | quick' if args.quick else ''}",
        flush=True,
    )
    fp32 = fp32_bytes(spec_for(args.model).path)
    common.check_memory(int(1.5 * fp32) + 2 * GIB, args.force)  # load peak + activations
    primed = common.prime_size(int(PRIME_FACTOR * fp32))
    seconds = common.prime_memory(primed)
    print(f"  primed {primed / GIB:.1f} GiB of memory in {seconds:.1f} s", flush=True)
    work = scratch_dir("step-bench-")
    try:
        rows = []
        for variant in VARIANTS:
            common.read_files(weight_files(spec_for(args.model).path))  # page cache warm
            rows.append(measure(variant, args, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    service, plain = rows
    print_table(rows, plain)
    total_ratio = fmt_ratio(ratio(service.total_seconds, plain.total_seconds))
    summary = (
        f"summary: {args.model} {args.size}x{args.size} CFG, {args.threads} threads: service "
        f"{service.median_step_seconds:.2f} s/step = "
        f"{fmt_ratio(ratio(service.median_step_seconds, plain.median_step_seconds))} plain "
        f"diffusers ({plain.median_step_seconds:.2f} s/step); whole call incl. decode "
        f"{service.total_seconds:.1f} s = {total_ratio} "
        f"plain ({plain.total_seconds:.1f} s)"
    )
    document = {
        "config": {
            "model": args.model, "size": args.size, "steps": args.steps,
            "guidance": args.guidance, "threads": args.threads, "seed": SEED,
            "quick": args.quick, "smoke": args.smoke, "prompt": PROMPT, "negative_prompt": NEGATIVE,
        },
        "results": [asdict(r) for r in rows],
        "ratios": {
            "service_vs_plain_step": ratio(service.median_step_seconds, plain.median_step_seconds),
            "service_vs_plain_total": ratio(service.total_seconds, plain.total_seconds),
        },
    }  # fmt: skip
    common.finish(f"step_{args.model}", machine, document, summary, args.json)
    return 0


def main(argv: list[str] | None = None) -> int:
    def child(args: argparse.Namespace) -> int:
        return run_as_child(args.child[0], args.model, args.size, args.steps, args.guidance)

    return common.main(parse_args, run, child, argv)


if __name__ == "__main__":
    sys.exit(main())
