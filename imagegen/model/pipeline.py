"""Builds the diffusers pipeline from the share, with every load knob in one place.

The seed's rules: fp32 weights from safetensors, on the device, with attention slicing and
VAE slicing and tiling to fit memory. No accelerate offload helper: on a CPU-only host
`enable_model_cpu_offload` fails ("requires accelerator, but not found").
"""

import logging
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadOptions:
    """The settings that change how (not what) the pipeline is built; see README."""

    threads: int | None = None  # torch's CPU threads (TORCH_THREADS; imagegen.model.cpu)
    streaming: bool = True  # MODEL_LOADER=streaming: imagegen.model.weights, peak near fp32 size
    attention_slicing: bool = True  # ATTENTION_SLICING: the seed's rule, on by default
    # (each slice computed by torch's fused kernel: imagegen.model.attention)


def load_pipeline(
    path: Path, *, variant: str | None, device: str, options: LoadOptions = LoadOptions()
):
    import torch
    from diffusers import DiffusionPipeline

    if options.threads is not None:
        torch.set_num_threads(options.threads)
        log.info("torch uses %d CPU threads", options.threads)
    components = {}
    if options.streaming:
        from imagegen.model.weights import streamed_components

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
    if options.attention_slicing:
        pipe.enable_attention_slicing()
        from imagegen.model.attention import use_fused_kernel_in_slices

        for component in pipe.components.values():
            if isinstance(component, torch.nn.Module):
                use_fused_kernel_in_slices(component)
    pipe.vae.enable_slicing()
    pipe.vae.enable_tiling()
    pipe.set_progress_bar_config(disable=True)
    return pipe


def native_size(pipe) -> tuple[int, int]:
    side = pipe.unet.config.sample_size * pipe.vae_scale_factor
    return side, side
