"""LoRA benchmark: a UNet step with a LoRA as unfused peft layers, fused into the weights, and
without one, and the time to apply and take it off each way.

Why it exists: a prompt's `<lora:name:weight>` runs for one image and must leave no trace
(imagegen.model.loras_applied). Unfused layers are put on and taken off without writing the
model's weights; fusing writes them and needs an exact unfuse or a pristine copy. The choice
is the per-step cost against the apply/remove cost. One process loads the full-size
random-weight UNet of bench/model_fixture.py in fp32 and LCM-LoRA's file for it (rank 64), and
times UNet calls at one size, the step's batch of one (a few-step recipe, no guidance).

    .venv/bin/python bench/lora_bench.py                 # SDXL, 512x512 (latents 64x64)
    .venv/bin/python bench/lora_bench.py --side 1024     # 1024x1024
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CACHE = ROOT / "bench" / ".cache" / "hub"
MODEL = CACHE / "bench" / "sdxl-random"
LORA = CACHE / "latent-consistency" / "lcm-lora-sdxl" / "pytorch_lora_weights.safetensors"


def main() -> None:
    import torch
    from diffusers import StableDiffusionXLPipeline, UNet2DConditionModel

    parser = argparse.ArgumentParser()
    parser.add_argument("--side", type=int, default=512)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--model", type=Path, default=MODEL, help="an SDXL-layout repo folder")
    parser.add_argument("--lora", type=Path, default=LORA, help="a LoRA file for it")
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    figures: dict[str, float] = {}
    unet = UNet2DConditionModel.from_pretrained(
        args.model / "unet", variant="fp16", torch_dtype=torch.float32
    )
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

    def said(name: str, value: float) -> None:
        """Each figure as it comes: a run stopped early keeps what it measured."""
        figures[name] = value
        print(f"{name}: {value:.4g}", flush=True)

    def calls() -> tuple[float, torch.Tensor]:
        out = unet(**inputs).sample  # warm-up
        seconds = []
        for _ in range(args.calls):
            started = time.perf_counter()
            out = unet(**inputs).sample
            seconds.append(time.perf_counter() - started)
        return statistics.median(seconds), out

    none_step, plain = calls()
    said("none_step_s", none_step)
    started = time.perf_counter()
    state, alphas = StableDiffusionXLPipeline.lora_state_dict(str(args.lora))
    state = {k: v.to(torch.float32) for k, v in state.items() if k.startswith("unet.")}
    StableDiffusionXLPipeline.load_lora_into_unet(state, alphas, unet=unet, adapter_name="bench")
    said("unfused_apply_s", time.perf_counter() - started)
    unfused_step, unfused = calls()
    said("unfused_step_s", unfused_step)
    started = time.perf_counter()
    unet.fuse_lora(lora_scale=1.0)
    said("fuse_s", time.perf_counter() - started)
    fused_step, fused = calls()
    said("fused_step_s", fused_step)
    started = time.perf_counter()
    unet.unfuse_lora()
    said("unfuse_s", time.perf_counter() - started)
    started = time.perf_counter()
    unet.unload_lora()
    said("unfused_remove_s", time.perf_counter() - started)
    _, after = calls()
    figures["fused_vs_unfused_max_abs"] = float((fused - unfused).abs().max())
    figures["after_unfuse_vs_none_max_abs"] = float((after - plain).abs().max())
    figures["unfused_over_none"] = figures["unfused_step_s"] / figures["none_step_s"]
    figures["fused_over_none"] = figures["fused_step_s"] / figures["none_step_s"]
    print(json.dumps({"side": args.side, "threads": torch.get_num_threads(), **figures}, indent=2))


if __name__ == "__main__":
    main()
