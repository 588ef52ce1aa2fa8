"""Adapter benchmark: the service's load with a LoRA fused in, against the same load without.

Why it exists: MODEL_ADAPTERS fuses LoRA weights into the fp32 UNet at load so that a step
costs what it cost without them. That claim has three parts, each measured here on
full-size random-weight SD 1.5 (bench/model_fixture.py) with a random LoRA of LCM-LoRA
SD 1.5's rank and shapes (rank 64 on 278 attention, feed-forward, convolution and time
projection layers, 67.3 M parameters, kohya's layout, fp16 on disk: `ensure_lora`):

- the load: seconds and peak RSS (VmHWM, right after the load) of
  `load_pipeline(..., adapters=[...])` against `load_pipeline(...)` alone, as a ratio to the
  model's fp32 bytes (the service's budget: <= 1.15x), and the seconds of the fuse itself;
- the result: the fused UNet's output against the unfused LoRA's (plain pipeline, the same
  fp32 LoRA weights loaded by peft as separate layers), max abs difference, beside the
  LoRA's own effect (unfused against no adapter);
- a step: one UNet forward at 512x512, batch 2 (guidance on), fused against no adapter,
  and, for scale, with the LoRA's layers unfused.

Beside it, VAE_DECODER's two decoders on one 512x512 image's latents, with slicing and
tiling on as the service loads them: SD 1.5's VAE (random weights, the real config)
against diffusers' AutoencoderTiny with its default config, which is TAESD's.

Each variant runs in a fresh child process (a load each, one model in memory at a time);
the fused and plain loads alternate over the rounds, and each child times one warm-up
forward and then `--steps` more (median reported). The UNet inputs are the same seeded
tensors in every child. Run it alone on the machine (`flock /tmp/fullsize-bench.lock`).

    .venv/bin/python bench/adapter_bench.py            # 2 rounds, 2 timed forwards (~8 min)
    .venv/bin/python bench/adapter_bench.py --quick    # 1 round, 1 timed forward
"""

from __future__ import annotations

import argparse
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
    LORA_ALPHA,
    LORA_RANK,
    LORA_STRENGTH,
    ensure_lora,
    ensure_model,
    fp32_bytes,
    lora_repo,
    safetensors_header,
    scratch_dir,
    spec_for,
    weight_files,
)

SCRIPT = Path(__file__).resolve()
MODEL = "sd15"
SIDE = 512
SCALE = 1.0  # LCM-LoRA's usual scale
VARIANTS = ("plain", "fused", "unfused")


@dataclass
class Row:
    name: str
    what: str
    load_seconds: list[float] = field(default_factory=list)
    fuse_seconds: list[float] = field(default_factory=list)
    load_peak_rss_bytes: list[int] = field(default_factory=list)
    load_peak_anon_bytes: list[int] = field(default_factory=list)
    forward_seconds: list[float] = field(default_factory=list)

    @property
    def step(self) -> float:
        return median(self.forward_seconds)

    @property
    def load(self) -> float:
        return median(self.load_seconds)

    @property
    def peak(self) -> int:
        return max(self.load_peak_rss_bytes)


# --- children ----------------------------------------------------------------------------------


def unet_inputs() -> dict[str, Any]:
    """Seeded inputs of one guided SD 1.5 step at 512x512: latents, timestep, text states."""
    import torch

    generator = torch.Generator().manual_seed(1234)
    return {
        "sample": torch.randn(2, 4, SIDE // 8, SIDE // 8, generator=generator),
        "timestep": torch.tensor([500]),
        "encoder_hidden_states": torch.randn(2, 77, 768, generator=generator),
    }


def timed(function: Any, spent: list[float]) -> Any:
    def run(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - started)

    return run


def load(variant: str, path: Path, lora: Path) -> tuple[Any, float]:
    """The pipeline of `variant` and the seconds its fuse took (0 without one)."""
    import torch

    from imagegen.model import adapters
    from imagegen.model.adapters import Adapter
    from imagegen.model.pipeline import load_pipeline

    adapter = Adapter(lora_repo(MODEL), lora.name, SCALE)
    if variant == "fused":
        spent: list[float] = []
        for stage in ("fuse_into_unet", "fuse_into_text_encoders"):
            # load_pipeline looks these up when it fuses: time them in place.
            setattr(adapters, stage, timed(getattr(adapters, stage), spent))
        pipe = load_pipeline(path, variant="fp16", device="cpu", adapters=[(adapter, lora)])
        assert adapters.lora_layers(pipe) == 0
        return pipe, sum(spent)
    pipe = load_pipeline(path, variant="fp16", device="cpu")
    if variant == "unfused":
        from imagegen.model.weights import read_safetensors

        pipe.load_lora_weights(dict(read_safetensors(lora, torch.float32)), adapter_name="lora")
        pipe.set_adapters(["lora"], [SCALE])
        assert adapters.lora_layers(pipe) > 0
    return pipe, 0.0


def decode_seconds(steps: int) -> dict[str, Any]:
    """Seconds of each decoder's decode of one 512x512 image's latents (the first a warm-up)."""
    import torch
    from diffusers import AutoencoderKL, AutoencoderTiny

    from bench.model_fixture import SD15_VAE

    latents = torch.randn(1, 4, SIDE // 8, SIDE // 8, generator=torch.Generator().manual_seed(7))
    result = {}
    for name, build in (("full", lambda: AutoencoderKL(**SD15_VAE)), ("tiny", AutoencoderTiny)):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            decoder = build().eval()
        decoder.enable_slicing()
        decoder.enable_tiling()
        seconds = []
        with torch.inference_mode():
            for _ in range(steps + 1):
                started = time.perf_counter()
                image = decoder.decode(latents).sample
                seconds.append(time.perf_counter() - started)
        result[name] = {
            "seconds": seconds,
            "decoder_params": sum(p.numel() for p in decoder.decoder.parameters()),
            "image_shape": list(image.shape),
        }
    return result


def run_as_child(variant: str, steps: int, out: Path) -> int:
    import torch

    if variant == "decode":
        common.emit_child_result(decode_seconds(steps))
        return 0

    path = spec_for(MODEL).path
    lora = ensure_lora(MODEL)
    memory = common.PeakMemory()
    started = time.perf_counter()
    pipe, fuse_seconds = load(variant, path, lora)
    load_seconds = time.perf_counter() - started
    load_peak_rss = common.proc_status_bytes("VmHWM")
    load_peak = memory.stop()
    inputs = unet_inputs()
    forwards = []
    with torch.inference_mode():
        for _ in range(steps + 1):  # the first is a warm-up
            started = time.perf_counter()
            output = pipe.unet(**inputs).sample
            forwards.append(time.perf_counter() - started)
    torch.save(output, out)
    common.emit_child_result(
        {
            "load_seconds": load_seconds,
            "fuse_seconds": fuse_seconds,
            "load_peak_rss_bytes": load_peak_rss,
            "load_peak_anon_bytes": load_peak["peak_anon_bytes"],
            "forward_seconds": forwards,
            "torch_threads": torch.get_num_threads(),
        }
    )
    return 0


# --- the run -------------------------------------------------------------------------------------


WHAT = {
    "plain": "load_pipeline, no adapter",
    "fused": "load_pipeline with the LoRA fused (MODEL_ADAPTERS)",
    "unfused": "no adapter + the LoRA as peft layers (reference)",
}


def measure(variant: str, row: Row, steps: int, work: Path) -> Path:
    common.read_files([*weight_files(spec_for(MODEL).path), ensure_lora(MODEL)])  # page cache
    out = work / f"{variant}-{len(row.load_seconds)}.pt"
    result = common.run_child(
        SCRIPT, [variant, "--steps", str(steps), "--out", str(out)], work / f"{variant}.log",
        timeout=3600, env={},
    )  # fmt: skip
    row.load_seconds.append(result["load_seconds"])
    row.fuse_seconds.append(result["fuse_seconds"])
    row.load_peak_rss_bytes.append(result["load_peak_rss_bytes"])
    row.load_peak_anon_bytes.append(result["load_peak_anon_bytes"])
    row.forward_seconds += result["forward_seconds"][1:]
    forwards = " ".join(f"{s:.1f}" for s in result["forward_seconds"])
    print(
        f"  {variant:<8} load {result['load_seconds']:.2f} s (fuse "
        f"{result['fuse_seconds']:.2f} s) | load peak RSS "
        f"{result['load_peak_rss_bytes'] / GIB:.2f} GiB | UNet forwards {forwards} s "
        f"(first: warm-up) | {result['torch_threads']} threads",
        flush=True,
    )
    return out


def print_table(rows: dict[str, Row], fp32: int) -> None:
    plain = rows["plain"]
    header = (
        f"{'variant':<8} {'load s':>7} {'vs plain':>8} {'fuse s':>7} {'peak GiB':>8} "
        f"{'/fp32':>6} {'fwd s':>7} {'vs plain':>8}  what"
    )
    print()
    print(header)
    print("-" * (len(header) + 45))
    for row in rows.values():
        print(
            f"{row.name:<8} {row.load:>7.2f} {fmt_ratio(ratio(row.load, plain.load)):>8} "
            f"{median(row.fuse_seconds):>7.2f} {row.peak / GIB:>8.2f} "
            f"{fmt_ratio(ratio(row.peak, fp32)):>6} {row.step:>7.2f} "
            f"{fmt_ratio(ratio(row.step, plain.step)):>8}  {row.what}"
        )
    print()


def compare(outputs: dict[str, Path]) -> dict[str, float]:
    import torch

    plain, fused, unfused = (torch.load(outputs[v]) for v in VARIANTS)
    return {
        "fused_vs_unfused_max_abs": (fused - unfused).abs().max().item(),
        "lora_effect_max_abs": (unfused - plain).abs().max().item(),
        "output_max_abs": unfused.abs().max().item(),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, help="plain and fused loads each (2; quick 1)")
    parser.add_argument("--steps", type=int, help="timed UNet forwards per child (2; quick 1)")
    parser.add_argument("--force", action="store_true", help="run even if memory looks short")
    parser.add_argument("--quick", action="store_true", help="a smaller run")
    parser.add_argument("--json", type=Path, help="where to write results")
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child", nargs=1, metavar="VARIANT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.rounds = args.rounds or (1 if args.quick else 2)
    args.steps = args.steps or (1 if args.quick else 2)
    if args.rounds < 1 or args.steps < 1:
        parser.error("--rounds and --steps must be positive")
    return args


def run(args: argparse.Namespace) -> int:
    machine = common.machine_info()
    common.print_machine(machine)
    path = ensure_model(MODEL)
    lora = ensure_lora(MODEL)
    fp32 = fp32_bytes(path)
    lora_params = (
        sum(
            entry["data_offsets"][1] - entry["data_offsets"][0]
            for key, entry in safetensors_header(lora).items()
            if key.endswith("weight")
        )
        // 2
    )  # fp16 on disk
    common.check_memory(int(1.3 * fp32) + 2 * GIB, args.force)  # a load + activations
    print(
        f"model: {spec_for(MODEL).repo_id}, {fp32 / GIB:.2f} GiB as fp32 | LoRA: "
        f"{lora_repo(MODEL)}, rank {LORA_RANK}, alpha {LORA_ALPHA:g}, {lora_params / 1e6:.1f} M "
        f"params ({lora.stat().st_size / 1e6:.1f} MB fp16, {4 * lora_params / GIB:.2f} GiB fp32), "
        f"scale {SCALE:g} | UNet forward {SIDE}x{SIDE} batch 2 | rounds {args.rounds}, "
        f"{args.steps} timed forwards each{' | quick' if args.quick else ''}",
        flush=True,
    )
    primed = common.prime_size(int(1.5 * fp32))
    print(f"  primed {primed / GIB:.1f} GiB in {common.prime_memory(primed):.1f} s", flush=True)
    rows = {v: Row(v, WHAT[v]) for v in VARIANTS}
    outputs: dict[str, Path] = {}
    work = scratch_dir("adapter-bench-")
    try:
        for round_ in range(args.rounds):
            order = ("plain", "fused") if round_ % 2 == 0 else ("fused", "plain")
            for variant in order:
                outputs[variant] = measure(variant, rows[variant], args.steps, work)
        outputs["unfused"] = measure("unfused", rows["unfused"], args.steps, work)
        difference = compare(outputs)
        decoders = common.run_child(
            SCRIPT, ["decode", "--steps", str(args.steps), "--out", str(work / "decode")],
            work / "decode.log", timeout=1800, env={},
        )  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_table(rows, fp32)
    plain, fused, unfused = (rows[v] for v in VARIANTS)
    print(
        f"UNet output: fused vs unfused LoRA max abs {difference['fused_vs_unfused_max_abs']:.2e} "
        f"| the LoRA's effect (unfused vs no adapter) {difference['lora_effect_max_abs']:.2e} "
        f"| output max abs {difference['output_max_abs']:.2e}"
    )
    full, tiny = (median(decoders[k]["seconds"][1:]) for k in ("full", "tiny"))
    print(
        f"decode of one {SIDE}x{SIDE} image (slicing + tiling): full VAE {full:.2f} s "
        f"({decoders['full']['decoder_params'] / 1e6:.1f} M decoder params), tiny "
        f"(TAESD's architecture) {tiny:.2f} s ({decoders['tiny']['decoder_params'] / 1e6:.1f} M) "
        f"= {fmt_ratio(ratio(tiny, full))}"
    )
    summary = (
        f"summary: SD 1.5 + rank-{LORA_RANK} LoRA: load fused {fused.load:.1f} s "
        f"(fuse {median(fused.fuse_seconds):.1f} s) vs plain {plain.load:.1f} s = "
        f"{fmt_ratio(ratio(fused.load, plain.load))} | load peak RSS / fp32 bytes: fused "
        f"{fmt_ratio(ratio(fused.peak, fp32))}, plain {fmt_ratio(ratio(plain.peak, fp32))} | "
        f"UNet forward fused {fused.step:.2f} s vs plain {plain.step:.2f} s = "
        f"{fmt_ratio(ratio(fused.step, plain.step))} (unfused LoRA {unfused.step:.2f} s = "
        f"{fmt_ratio(ratio(unfused.step, plain.step))}) | fused vs unfused max abs "
        f"{difference['fused_vs_unfused_max_abs']:.1e} | decode {SIDE}x{SIDE}: tiny "
        f"{tiny:.2f} s vs full VAE {full:.2f} s = {fmt_ratio(ratio(tiny, full))}"
    )
    document = {
        "machine": machine | {"load_average_at_end": common.load_average()},
        "config": {
            "model": MODEL, "side": SIDE, "batch": 2, "rounds": args.rounds,
            "timed_forwards": args.steps, "quick": args.quick, "scale": SCALE,
        },
        "model": {"repo_id": spec_for(MODEL).repo_id, "fp32_bytes": fp32},
        "lora": {
            "repo_id": lora_repo(MODEL), "rank": LORA_RANK, "alpha": LORA_ALPHA,
            "strength": LORA_STRENGTH, "params": lora_params, "fp16_bytes": lora.stat().st_size,
            "layout": "kohya (lora_unet_*.lora_down/lora_up/alpha), LCM-LoRA's target modules",
        },
        "results": [asdict(row) for row in rows.values()],
        "output_difference": difference,
        "decoders": decoders,
        "ratios": {
            "fused_vs_plain_load_seconds": ratio(fused.load, plain.load),
            "fused_load_peak_rss_vs_fp32": ratio(fused.peak, fp32),
            "plain_load_peak_rss_vs_fp32": ratio(plain.peak, fp32),
            "fused_vs_plain_forward": ratio(fused.step, plain.step),
            "unfused_vs_plain_forward": ratio(unfused.step, plain.step),
            "tiny_vs_full_decode": ratio(tiny, full),
        },
        "summary": summary,
    }  # fmt: skip
    written = common.write_json(f"adapter_{MODEL}", document, args.json)
    print(f"results written to {written}")
    print(summary)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return run_as_child(args.child[0], args.steps, args.out)
    common.install_signal_handlers()
    try:
        return run(args)
    except common.Interrupted:
        print("\ninterrupted; temp files and child processes were cleaned up", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
