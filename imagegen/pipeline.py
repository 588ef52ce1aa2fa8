"""Builds the diffusers pipeline from the share, with every load knob in one place.

The seed's rules: fp32 weights from safetensors, on the device, with attention slicing and
VAE slicing and tiling to fit memory. No accelerate offload helper: on a CPU-only host
`enable_model_cpu_offload` fails ("requires accelerator, but not found").
"""

import logging
from pathlib import Path

log = logging.getLogger(__name__)


def load_pipeline(path: Path, *, variant: str | None, device: str):
    import torch
    from diffusers import DiffusionPipeline

    pipe = DiffusionPipeline.from_pretrained(
        path,
        dtype=torch.float32,
        use_safetensors=True,
        local_files_only=True,
        variant=variant,
    )
    pipe.to(device)
    pipe.enable_attention_slicing()
    pipe.vae.enable_slicing()
    pipe.vae.enable_tiling()
    pipe.set_progress_bar_config(disable=True)
    return pipe


def native_size(pipe) -> tuple[int, int]:
    side = pipe.unet.config.sample_size * pipe.vae_scale_factor
    return side, side
