"""Prompt cache benchmark: one image of a prompt sent again, with PROMPT_CACHE on and off.

Why it exists: a one-step recipe spends one UNet call per image, so the text encoders are a
visible share of it, and a batch, `n` > 1, a retry or "use these settings" sends the same prompt
again. One run loads the service's pipeline once (`imagegen.model.pipeline.load_pipeline`, on
the full-size random-weight repo of bench/model_fixture.py) and renders the same prompt with a
new seed each time, alternating the cache off and on (the cache warmed by one image first),
through `imagegen.generation.render.render` as a job calls it. Each image's encode, denoise and
decode seconds come from render's stage marks. The images of both sides are compared: the cache
must change no pixel.

    .venv/bin/python bench/prompt_cache_bench.py                # SDXL 512x512, 1 step, guidance 0
    .venv/bin/python bench/prompt_cache_bench.py --model sd15   # SD 1.5 512x512
    .venv/bin/python bench/prompt_cache_bench.py --smoke        # the tests' tiny SD: tests/bench/
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from bench.common import GIB, fmt_ratio, median, ratio  # noqa: E402
from bench.model_fixture import ensure_model, fp32_bytes, spec_for  # noqa: E402

PROMPT = "a photo of an astronaut riding a horse on the sea at sunset, detailed"
SIZE = {"sdxl": 512, "sd15": 512, "tiny": 64}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("sdxl", "sd15", "tiny"), default="sdxl")
    parser.add_argument("--smoke", action="store_true", help="the tests' tiny SD, 2 rounds")
    parser.add_argument("--rounds", type=int, default=5, help="images per side (median)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--force", action="store_true", help="run even if memory looks short")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.smoke:
        args.model, args.rounds, args.threads = "tiny", 2, 1
    return args


def render_once(pipe: Any, seed: int, model: str) -> tuple[dict[str, float], Any]:
    from imagegen.generation.images import GenerationParameters
    from imagegen.generation.render import render

    side = SIZE[model]
    chosen = GenerationParameters(
        prompt=PROMPT, negative_prompt=None, steps=1, guidance=0.0, width=side, height=side,
        seed=seed, scheduler="Euler", model_id=model, revision=None,
    )  # fmt: skip
    rendered = render(
        pipe, chosen, scheduler=None, device="cpu", home="cpu",
        on_step=lambda done, total: None, stop_requested=lambda: False,
    )  # fmt: skip
    return rendered.stages, rendered.image


def run(args: argparse.Namespace) -> int:
    import numpy
    import torch

    from imagegen.model import prompt_cache
    from imagegen.model.pipeline import LoadOptions, load_pipeline

    machine = common.machine_info()
    common.print_machine(machine, f"torch threads {args.threads}")
    path = ensure_model(args.model)
    common.check_memory(int(1.3 * fp32_bytes(path)) + GIB, args.force)
    torch.set_num_threads(args.threads)
    side = SIZE[args.model]
    print(
        f"model: {spec_for(args.model).repo_id} | {side}x{side} | 1 step | guidance 0", flush=True
    )
    pipe = load_pipeline(path, variant="fp16", device="cpu", options=LoadOptions(prompt_cache=32))
    cache = prompt_cache.cache_of(pipe)
    render_once(pipe, 0, args.model)  # warm-up; fills the cache
    sides: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    same = True
    for seed in range(1, args.rounds + 1):
        for side_name in ("off", "on"):
            if side_name == "off":
                delattr(pipe, prompt_cache.ATTRIBUTE)
            stages, image = render_once(pipe, seed, args.model)
            if side_name == "off":
                setattr(pipe, prompt_cache.ATTRIBUTE, cache)
                reference = numpy.asarray(image)
            else:
                same = same and numpy.array_equal(reference, numpy.asarray(image))
            stages["total_seconds"] = sum(stages.values())
            sides[side_name].append(stages)
            print(f"  seed {seed} cache {side_name}: " + ", ".join(
                f"{k} {v:.3f}" for k, v in stages.items()), flush=True)  # fmt: skip
    medians = {
        name: {k: median([r[k] for r in rows]) for k in rows[0]} for name, rows in sides.items()
    }
    on, off = medians["on"]["total_seconds"], medians["off"]["total_seconds"]
    summary = (
        f"summary: {args.model} {side}x{side} 1 step, {args.threads} threads: a prompt sent again "
        f"{on:.2f} s with the cache = {fmt_ratio(ratio(on, off))} without ({off:.2f} s; encoding "
        f"{medians['off']['encode_seconds']:.3f} s of it); images equal: {same}"
    )
    document = {
        "config": {
            "model": args.model,
            "size": side,
            "rounds": args.rounds,
            "threads": args.threads,
            "prompt": PROMPT,
        },
        "results": sides,
        "medians": medians,
        "ratios": {"cache_on_vs_off": ratio(on, off)},
        "images_equal": same,
        "cache_hits": cache.hits if cache is not None else 0,
    }
    common.finish(f"prompt_cache_{args.model}", machine, document, summary, args.json)
    return 0 if same else 1


def main(argv: list[str] | None = None) -> int:
    return common.main(parse_args, run, None, argv)


if __name__ == "__main__":
    sys.exit(main())
