"""OpenAI `quality` benchmark: the time to image of each recipe (low, medium, high) through
`POST /v1/images/generations`, on a full-size model, in one run.

Why it exists: `quality` is the one speed knob OpenAI's clients (LibreChat, Open WebUI) send,
and each value maps onto a step recipe (imagegen.generation.presets.QUALITIES: low half the
model's default steps, medium the defaults, high 1.5 times them within a few-step model's
cap); what a person waits for each is what docs/openai.md promises, so it is measured here.

One app under gunicorn (tests.support.processes.AppServer, DEVICE=cpu) on the random-weight
full-size repo (bench/model_fixture.py; random weights cost what real ones cost), placed on
its share as a complete download and loaded before timing, and one untimed 1-step image
made (warm_up); then, `--repeat` times, one
request per quality in turn (so a slow moment of the machine falls on every recipe alike),
each timed from the request to the answer's base64 PNG, with the job's steps and stage
timings read back from its record. The machine's load average is recorded per request.

- `--model sd15` (the default): SD 1.5 as its own MODEL_ID, no preset: 20 steps at guidance
  7, the full decoder: low 10, medium 20, high 30 steps.
- `--model sdxl`: the service as it ships (the default MODEL_ID and its SDXL-Lightning 4-step
  LoRA, random weights of its rank and size, and TAESDXL): low 2, medium 4, high 4 steps
  (Lightning is distilled for its 4 and capped there).

Run it alone on the machine, under the lock the full-size benches share:

    flock /tmp/fullsize-bench.lock .venv/bin/python bench/quality_bench.py --model sd15 --size 512
    .venv/bin/python bench/quality_bench.py --model tiny --size 64    # a smoke run, seconds
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from bench.model_fixture import (  # noqa: E402
    ensure_default_lora,
    ensure_model,
    ensure_tiny_decoder,
    place_on_share,
    scratch_dir,
    spec_for,
    weight_files,
)
from bench.time_to_image_bench import (  # noqa: E402
    DEFAULTS,
    PROMPT,
    SEED,
    SHIPPED,
    service_app,
    service_env,
    wait_ready,
    worker_pid,
)
from imagegen.model.adapters import DEFAULT_MODEL_ID  # noqa: E402

QUALITIES = ("low", "medium", "high")


def one_request(app: Any, quality: str, size: int) -> dict[str, Any]:
    """One image at `quality`: the client's seconds, the job's steps and stage timings."""
    load = common.load_average()
    started = time.perf_counter()
    answer = requests.post(
        app.url("/v1/images/generations"),
        json={"prompt": PROMPT, "size": f"{size}x{size}", "quality": quality, "seed": SEED,
              "response_format": "b64_json"},
        timeout=7200,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    if answer.status_code != 200 or not answer.json()["data"][0]["b64_json"]:
        raise RuntimeError(f"{quality}: {answer.status_code} {answer.text[:300]}")
    (job,) = requests.get(app.url("/jobs"), params={"limit": 1}, timeout=30).json()
    if job["parameters"].get("quality") != quality:
        raise RuntimeError(f"{quality}: the newest job is another's: {job['parameters']}")
    timings = job["image"]["timings"]
    return {
        "quality": quality, "seconds": seconds, "steps": job["parameters"]["steps"],
        "guidance": job["parameters"]["guidance"], "preset": job["parameters"].get("preset"),
        "encode": timings["encode_seconds"], "denoise": timings["denoise_seconds"],
        "decode": timings["decode_seconds"], "load": load,
    }  # fmt: skip


def warm_up(app: Any, size: int) -> None:
    """One untimed 1-step image first: the first request of a process pays for its memory
    faulted in and its kernels chosen (a first 10-step SD 1.5 image took longer than the
    20-step one after it), which is no quality's cost."""
    started = time.perf_counter()
    answer = requests.post(
        app.url("/v1/images/generations"),
        json={"prompt": PROMPT, "size": f"{size}x{size}", "steps": 1, "seed": SEED},
        timeout=7200,
    )
    answer.raise_for_status()
    print(f"  warm-up (1 step, untimed): {time.perf_counter() - started:.1f} s", flush=True)


def measure(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The app of `args.model` loaded, then `repeat` rounds of one request per quality."""
    spec = spec_for(args.model)
    ensure_model(args.model)
    shipped = args.model == "sdxl"
    config = SHIPPED if shipped else DEFAULTS
    if shipped:
        ensure_default_lora()
        ensure_tiny_decoder(args.model)
    model_dir = work / "share"
    repo_id = DEFAULT_MODEL_ID if shipped else spec.repo_id
    place_on_share(args.model, model_dir, adapters=config.adapters(args.model),
                   tiny_decoder=config.tiny, repo_id=repo_id)  # fmt: skip
    env = service_env(model_dir, None if shipped else repo_id, work, args.threads)
    if not shipped:
        env["VAE_DECODER"] = "full"
    app = service_app(config, args.model, env, work / "service.log")
    common.read_files(weight_files(spec.path))  # the page cache warm, as for every bench
    app.start(120)
    try:
        load_seconds = wait_ready(app, timeout=1800)
        peak_pid = worker_pid(app)
        print(f"  loaded in {load_seconds:.1f} s (worker {peak_pid})", flush=True)
        warm_up(app, args.size)
        samples = []
        for round_ in range(args.repeat):
            for quality in QUALITIES:
                sample = one_request(app, quality, args.size)
                print(
                    f"  round {round_ + 1} {quality:>6}: {sample['seconds']:7.2f} s, "
                    f"{sample['steps']} steps (denoise {sample['denoise']:.2f} s, decode "
                    f"{sample['decode']:.2f} s), load {sample['load']}",
                    flush=True,
                )
                samples.append(sample)
    finally:
        app.stop()
        shutil.rmtree(model_dir, ignore_errors=True)
    return {"model": spec.repo_id, "shipped": shipped, "load_seconds": load_seconds,
            "samples": samples}  # fmt: skip


def table(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per quality: the median seconds and its ratio to medium's."""
    rows = []
    for quality in QUALITIES:
        own = [s for s in result["samples"] if s["quality"] == quality]
        rows.append({
            "quality": quality, "steps": own[0]["steps"], "preset": own[0]["preset"],
            "seconds": statistics.median(s["seconds"] for s in own),
            "denoise": statistics.median(s["denoise"] for s in own),
            "decode": statistics.median(s["decode"] for s in own),
        })  # fmt: skip
    medium = next(r["seconds"] for r in rows if r["quality"] == "medium")
    return [row | {"vs_medium": row["seconds"] / medium} for row in rows]


def run(args: argparse.Namespace) -> int:
    machine = common.machine_info()
    common.print_machine(machine, f"torch threads {args.threads}")
    work = scratch_dir("quality-")
    try:
        result = measure(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = table(result)
    print(f"\n{result['model']} at {args.size}x{args.size} (median of {args.repeat}):")
    for row in rows:
        print(
            f"  {row['quality']:>6}: {row['steps']:3d} steps  {row['seconds']:7.2f} s  "
            f"({row['vs_medium']:.2f}x medium; denoise {row['denoise']:.2f} s, decode "
            f"{row['decode']:.2f} s)"
        )
    summary = "summary: " + ", ".join(
        f"{r['quality']} {r['steps']} steps {r['seconds']:.1f} s ({r['vs_medium']:.2f}x)"
        for r in rows
    ) + f" | {result['model']} {args.size}x{args.size}, {args.threads} threads"  # fmt: skip
    config = {k: v for k, v in vars(args).items() if k != "json"}
    document = {"config": config | {"prompt": PROMPT, "seed": SEED},
                "result": result, "table": rows}  # fmt: skip
    common.finish("quality", machine, document, summary, args.json)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="sd15", help="sd15 (default), sdxl (as shipped), tiny")
    parser.add_argument("--size", type=int, default=512, help="the image's side (default 512)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of the three (default 1)")
    parser.add_argument("--threads", type=int, default=2, help="TORCH_THREADS (default 2)")
    parser.add_argument("--json", type=Path, default=None, help="where to write the results")
    return parser.parse_args(argv)


if __name__ == "__main__":
    raise SystemExit(common.main(parse_args, run))
