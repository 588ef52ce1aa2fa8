"""LoRA benchmark: a UNet step with a LoRA as unfused peft layers (the service's path), fused
into the weights, and without one; and the time to apply and take it off each way.

Why it exists: a prompt's `<lora:name:weight>` runs for one image and must leave no trace.
The service puts unfused layers on and takes them off (imagegen.model.loras_applied.applied),
never writing the model's weights. Fusing writes them, so taking it off needs an exact unfuse
or a pristine copy of every weight it touched. The choice is the per-step cost against the
apply/remove cost (and the copy's memory). One process loads the full-size random-weight
SDXL UNet of bench/model_fixture.py in fp32 and a LoRA file for it (by default the bench
cache's random LCM-LoRA for SDXL: rank 64 over the attention, feed-forward, resnet and
sampler layers, 394 MB, kohya's key layout), and times UNet calls at one size, batch 1 (a
few-step recipe, no guidance), in this order:

1. none: the UNet as loaded (after one warm-up call);
2. unfused: `applied(pipe, [(lora, 1.0)])` entered (apply), calls, left (remove); the
   output after removal is compared with none's;
3. fused: the LoRA loaded and fused (pipe.fuse_lora), calls, then unfused (pipe.unfuse_lora):
   its weights are compared with the model file's; then the pristine alternative: every
   touched weight read back from the model file (the page cache) and copied in; a last call
   is compared with none's.

    .venv/bin/python bench/lora_bench.py                 # SDXL, 512x512 (latents 64x64)
    .venv/bin/python bench/lora_bench.py --side 1024     # 1024x1024
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from bench.common import GIB  # noqa: E402

CACHE = ROOT / "bench" / ".cache" / "hub"
MODEL = CACHE / "bench" / "sdxl-random"
LORA = CACHE / "latent-consistency" / "lcm-lora-sdxl" / "pytorch_lora_weights.safetensors"


def unet_file(model: Path) -> Path:
    """The UNet's weights file (the fp16 variant the bench fixture writes, else fp32)."""
    for name in ("diffusion_pytorch_model.fp16.safetensors", "diffusion_pytorch_model.safetensors"):
        if (model / "unet" / name).exists():
            return model / "unet" / name
    raise FileNotFoundError(f"no UNet weights under {model / 'unet'}")


def touched(unet: Any) -> dict[str, Any]:
    """The weights a loaded LoRA wraps, by their key in the model file: peft keeps each
    original layer as `<name>.base_layer`."""
    return {
        name.removesuffix(".base_layer") + ".weight": module.weight
        for name, module in unet.named_modules()
        if name.endswith(".base_layer")
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", type=int, default=512, help="image side, pixels (512)")
    parser.add_argument("--calls", type=int, default=3, help="timed UNet calls a variant (3)")
    parser.add_argument("--model", type=Path, default=MODEL, help="an SDXL-layout repo folder")
    parser.add_argument("--lora", type=Path, default=LORA, help="a LoRA file for it")
    parser.add_argument("--json", type=Path, help="where to write results")
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> int:
    import torch
    from diffusers import StableDiffusionXLPipeline, UNet2DConditionModel
    from safetensors import safe_open

    from imagegen.model.loras_applied import applied

    machine = common.machine_info()
    common.print_machine(machine, f"torch threads {torch.get_num_threads()}")
    torch.set_grad_enabled(False)
    figures: dict[str, Any] = {}
    steps: dict[str, list[float]] = {}

    def said(name: str, value: float) -> None:
        """Each figure as it comes: a run stopped early keeps what it measured."""
        figures[name] = value
        print(f"{name}: {value:.4g} (load {common.load_average()})", flush=True)

    started = time.perf_counter()
    unet = UNet2DConditionModel.from_pretrained(
        args.model / "unet", variant="fp16", torch_dtype=torch.float32
    )
    said("unet_load_s", time.perf_counter() - started)
    # The service's pipeline, with only the part a LoRA here touches: applied() takes a pipeline.
    pipe = StableDiffusionXLPipeline(
        vae=None, text_encoder=None, text_encoder_2=None, tokenizer=None, tokenizer_2=None,
        unet=unet, scheduler=None,
    )  # fmt: skip
    config = unet.config
    pooled = config.projection_class_embeddings_input_dim - 6 * config.addition_time_embed_dim
    generator = torch.Generator().manual_seed(0)
    latent = args.side // 8
    inputs = {
        "sample": torch.randn(1, 4, latent, latent, generator=generator),
        "timestep": torch.tensor([999]),
        "encoder_hidden_states": torch.randn(
            1, 77, config.cross_attention_dim, generator=generator
        ),
        "added_cond_kwargs": {
            "text_embeds": torch.randn(1, pooled, generator=generator),
            "time_ids": torch.tensor([[args.side, args.side, 0, 0, args.side, args.side]]),
        },
    }

    def calls(name: str, count: int) -> Any:
        out = None
        steps[name] = []
        for _ in range(count):
            started = time.perf_counter()
            out = unet(**inputs).sample
            steps[name].append(time.perf_counter() - started)
            print(f"  {name} call: {steps[name][-1]:.2f} s", flush=True)
        if steps[name]:
            said(f"{name}_step_s", statistics.median(steps[name]))
        return out

    def vs_plain(name: str, out: Any) -> None:
        figures[name] = float((out - plain).abs().max())
        print(f"{name}: {figures[name]:.3g}", flush=True)

    calls("warm_up", 1)
    plain = calls("none", args.calls)
    figures["resident_after_load_bytes"] = common.proc_status_bytes("VmRSS")

    # 2. The service's path: unfused peft layers put on for the block and taken off after.
    with contextlib.ExitStack() as stack:
        started = time.perf_counter()
        stack.enter_context(applied(pipe, [(args.lora, 1.0)]))
        said("unfused_apply_s", time.perf_counter() - started)
        wrapped = touched(unet)
        figures["touched_layers"] = len(wrapped)
        figures["touched_weight_bytes"] = sum(
            w.numel() * w.element_size() for w in wrapped.values()
        )
        figures["adapter_bytes"] = sum(
            p.numel() * p.element_size() for n, p in unet.named_parameters() if "lora_" in n
        )
        print(
            f"  {len(wrapped)} layers wrapped, their weights "
            f"{figures['touched_weight_bytes'] / GIB:.2f} GiB, the adapters "
            f"{figures['adapter_bytes'] / GIB:.3f} GiB",
            flush=True,
        )
        unfused = calls("unfused", args.calls)
        started = time.perf_counter()
    said("unfused_remove_s", time.perf_counter() - started)
    vs_plain("after_remove_vs_none_max_abs", calls("after_remove", 1))

    # 3. Fused: the same load, then the LoRA written into the weights.
    from safetensors.torch import load_file

    started = time.perf_counter()
    state = {k: v.to(torch.float32) for k, v in load_file(args.lora).items()}
    pipe.load_lora_weights(state, adapter_name="fused")
    del state
    said("fused_load_s", time.perf_counter() - started)
    started = time.perf_counter()
    pipe.fuse_lora(components=["unet"], lora_scale=1.0)
    said("fuse_s", time.perf_counter() - started)
    fused = calls("fused", args.calls)
    figures["fused_vs_unfused_max_abs"] = float((fused - unfused).abs().max())
    started = time.perf_counter()
    pipe.unfuse_lora(components=["unet"])
    said("unfuse_s", time.perf_counter() - started)
    wrapped = touched(unet)
    worst = 0.0
    changed = 0
    with safe_open(unet_file(args.model), "pt") as original:
        for key, weight in wrapped.items():
            pristine = original.get_tensor(key).to(torch.float32)
            difference = float((weight - pristine).abs().max())
            worst = max(worst, difference)
            changed += difference > 0
    figures["unfused_weights_vs_file_max_abs"] = worst
    figures["unfused_weights_changed_layers"] = changed
    print(f"after unfuse: {changed} of {len(wrapped)} weights differ, at most {worst:.3g}")
    # The pristine alternative: every touched weight read back from the model file and copied in.
    started = time.perf_counter()
    with safe_open(unet_file(args.model), "pt") as original:
        for key, weight in wrapped.items():
            weight.copy_(original.get_tensor(key))
    said("pristine_restore_s", time.perf_counter() - started)
    started = time.perf_counter()
    pipe.unload_lora_weights()
    said("fused_unload_s", time.perf_counter() - started)
    vs_plain("after_restore_vs_none_max_abs", calls("after_restore", 1))
    figures["peak_rss_bytes"] = common.proc_status_bytes("VmHWM")

    none_step = figures["none_step_s"]
    ratios = {
        "unfused_over_none": figures["unfused_step_s"] / none_step,
        "fused_over_none": figures["fused_step_s"] / none_step,
        "unfused_over_fused": figures["unfused_step_s"] / figures["fused_step_s"],
    }
    fused_round_trip = figures["fused_load_s"] + figures["fuse_s"] + figures["unfuse_s"]
    common.print_table(
        [("variant", 9), ("s/step", 8), ("vs none", 8), ("put on s", 9), ("taken off s", 12),
         ("what", 0)],
        [["none", f"{none_step:.2f}", "1.00x", "-", "-", "the UNet as loaded"],
         ["unfused", f"{figures['unfused_step_s']:.2f}", f"{ratios['unfused_over_none']:.2f}x",
          f"{figures['unfused_apply_s']:.1f}", f"{figures['unfused_remove_s']:.1f}",
          "the service: applied() puts peft layers on and takes them off"],
         ["fused", f"{figures['fused_step_s']:.2f}", f"{ratios['fused_over_none']:.2f}x",
          f"{figures['fused_load_s'] + figures['fuse_s']:.1f}",
          f"{figures['unfuse_s']:.1f} / {figures['pristine_restore_s']:.1f}",
          "load + fuse_lora; taken off by unfuse_lora / by a pristine copy from the file"]],
    )  # fmt: skip
    summary = (
        f"summary: SDXL UNet {args.side}x{args.side}, a rank-{lora_rank(args.lora)} LoRA on "
        f"{figures['touched_layers']} layers: unfused {figures['unfused_step_s']:.2f} s/step = "
        f"{ratios['unfused_over_none']:.2f}x none ({none_step:.2f} s), fused "
        f"{ratios['fused_over_none']:.2f}x; unfused on+off "
        f"{figures['unfused_apply_s'] + figures['unfused_remove_s']:.1f} s, fused on+unfuse "
        f"{fused_round_trip:.1f} s (unfuse off by {worst:.2g}), exact after removal: "
        f"{figures['after_remove_vs_none_max_abs'] == 0}"
    )
    document = {
        "config": {"side": args.side, "calls": args.calls, "model": str(args.model),
                   "lora": str(args.lora), "lora_rank": lora_rank(args.lora),
                   "threads": torch.get_num_threads()},
        "figures": figures, "steps": steps, "ratios": ratios,
    }  # fmt: skip
    common.finish("lora", machine, document, summary, args.json)
    return 0


def lora_rank(path: Path) -> int:
    """The LoRA's rank: the first down (A) matrix's output rows."""
    from safetensors import safe_open

    with safe_open(path, "pt") as lora:
        for key in lora.keys():  # noqa: SIM118 (safe_open is no dict)
            if key.endswith(("lora_down.weight", "lora_A.weight")):
                return int(lora.get_slice(key).get_shape()[0])
    return 0


def main(argv: list[str] | None = None) -> int:
    return common.main(parse_args, run, None, argv)


if __name__ == "__main__":
    sys.exit(main())
