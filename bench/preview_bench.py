"""What a live preview costs beside a denoising step, at SDXL 1024x1024 on this machine.

Why it exists: previews are made after every step (PREVIEW_EVERY, at most one a second), so
their cost must stay a small fraction of a step's: the issue's bound is 2 % for the linear
approximation and 10 % for the tiny decoder. A step at this size is one UNet call of batch 2
(guidance on) on 128x128 latents; a preview is what imagegen.generation.previews.Previewer
makes after it (the picture and its JPEG), timed alone, in the same run, on the same threads.

- the step: SDXL's UNet (bench/model_fixture.py's full-size random-weight repo: the cost is
  the architecture's, not the weights'), previews off, a first call as a warm-up, then the
  median of `--steps` calls;
- `approx`: the linear latent-to-RGB map and its JPEG, median of 50;
- `tiny`: TAESDXL's architecture (the fixture's random-weight taesdxl) on latents shrunk to a
  256 px picture, and its JPEG, median of 10.

    .venv/bin/python bench/preview_bench.py --hub /work/main/bench/.cache/hub   # ~5 min, ~12 GiB
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from imagegen.generation.previews import APPROX, TINY, Previewer, PreviewPolicy  # noqa: E402

SDXL_REPO = "bench/sdxl-random"
TAESDXL_REPO = "madebyollin/taesdxl"


def timed(call, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def step_seconds(hub: Path, steps: int) -> float:
    import torch
    from diffusers import UNet2DConditionModel

    unet = UNet2DConditionModel.from_pretrained(
        hub / SDXL_REPO / "unet", variant="fp16", torch_dtype=torch.float32
    ).eval()
    unet.set_attention_slice("auto")  # the service's rule (imagegen/model/attention.py)
    latents = torch.randn(2, 4, 128, 128)
    text = torch.randn(2, 77, 2048)
    extra = {
        "text_embeds": torch.randn(2, 1280),
        "time_ids": torch.tensor([[1024.0, 1024, 0, 0, 1024, 1024]] * 2),
    }

    def step() -> None:
        with torch.inference_mode():
            unet(latents, 500, encoder_hidden_states=text, added_cond_kwargs=extra)

    step()  # warm-up
    seconds = timed(step, steps)
    return seconds


def preview_seconds(hub: Path) -> dict[str, float]:
    import torch
    from diffusers import AutoencoderTiny

    latents = torch.randn(1, 4, 128, 128)  # a 1024x1024 image's
    sdxl = type("StableDiffusionXLPipeline", (), {})()
    approx = Previewer(sdxl, PreviewPolicy(method=APPROX, seconds=0))
    vae = AutoencoderTiny.from_pretrained(hub / TAESDXL_REPO, torch_dtype=torch.float32).eval()
    tiny = Previewer(SimpleNamespace(vae=vae), PreviewPolicy(method=TINY, seconds=0))
    step = iter(range(1, 10**6))
    made = approx.make(latents, next(step), 10)
    tiny_made = tiny.make(latents, next(step), 10)
    assert made is not None and tiny_made is not None
    return {
        "approx_seconds": timed(lambda: approx.make(latents, next(step), 10**6), 50),
        "approx_side": made.width,
        "approx_bytes": len(made.data),
        "tiny_seconds": timed(lambda: tiny.make(latents, next(step), 10**6), 10),
        "tiny_side": tiny_made.width,
        "tiny_bytes": len(tiny_made.data),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hub", type=Path, default=ROOT / "bench" / ".cache" / "hub")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    previews = preview_seconds(args.hub)
    step = step_seconds(args.hub, args.steps)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    result = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch threads {args.threads}",
        "step_seconds": round(step, 3),
        **{k: round(v, 5) if isinstance(v, float) else v for k, v in previews.items()},
        "approx_fraction_of_step": round(previews["approx_seconds"] / step, 6),
        "tiny_fraction_of_step": round(previews["tiny_seconds"] / step, 6),
    }
    print(json.dumps(result, indent=2))
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / "preview_bench.json").write_text(json.dumps(result, indent=2) + "\n")
    approx, tiny = result["approx_fraction_of_step"], result["tiny_fraction_of_step"]
    print(f"summary: approx {approx:.4%} and tiny {tiny:.2%} of a {step:.1f} s SDXL step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
