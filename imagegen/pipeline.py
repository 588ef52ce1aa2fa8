"""Builds the diffusers pipeline from the share, with every load knob in one place.

The seed's rules: fp32 weights from safetensors, on the device, with attention slicing and
VAE slicing and tiling to fit memory. No accelerate offload helper: on a CPU-only host
`enable_model_cpu_offload` fails ("requires accelerator, but not found").
"""

import logging
from pathlib import Path

log = logging.getLogger(__name__)


def load_pipeline(
    path: Path,
    *,
    variant: str | None,
    device: str,
    threads: int | None = None,
    streaming: bool = True,
):
    """streaming: build the torch components with imagegen.weights (peak memory near the
    fp32 size) instead of diffusers' own loading (1.5x); see LOADER in README."""
    import torch
    from diffusers import DiffusionPipeline

    if threads is not None:
        torch.set_num_threads(threads)  # see imagegen.cpu
        log.info("torch uses %d CPU threads", threads)
    components = {}
    if streaming:
        from imagegen.weights import streamed_components

        components = streamed_components(path, variant=variant, dtype=torch.float32)
    pipe = DiffusionPipeline.from_pretrained(
        path,
        **components,
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
