"""Builds the diffusers pipeline from the share, with every load knob in one place.

The contract's rules: fp32 safetensors weights, attention and VAE slicing, VAE tiling. No
accelerate offload: on a CPU-only host `enable_model_cpu_offload` fails. LoRA adapters fuse
into the UNet as soon as it loads (imagegen.model.adapters). The tiny decoder can replace the
VAE (imagegen.model.decoder)."""

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from importlib import import_module
from pathlib import Path
from typing import Any

from imagegen.model.adapters import Adapter
from imagegen.model.prompt_cache import attach as attach_prompt_cache

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadOptions:
    """The settings that change how (not what) the pipeline is built; see docs/configuration.md."""

    threads: int | None = None  # torch's CPU threads (TORCH_THREADS; imagegen.model.cpu)
    streaming: bool = True  # imagegen.model.weights, peak near fp32 size; off: diffusers' own
    attention_slicing: bool = True  # ATTENTION_SLICING: the contract's rule, on by default
    # (each slice computed by torch's fused kernel: imagegen.model.attention) VAE_TILE_SIZE: the
    # full VAE's decode tiles in pixels; 0: diffusers'; None (auto): from the memory limit and the
    # weights (imagegen.model.memory.vae_tile_for)
    vae_tile: int | None = 0
    prompt_cache: int = 0  # PROMPT_CACHE: encodings kept per model (imagegen.model.prompt_cache)


def load_pipeline(
    path: Path,
    *,
    variant: str | None,
    device: str,
    options: LoadOptions = LoadOptions(),
    adapters: Sequence[tuple[Adapter, Path]] = (),
    tiny_decoder: Path | None = None,
):
    """The pipeline in `path`, with `adapters` fused in and `tiny_decoder` as VAE if given."""
    import torch
    from diffusers import DiffusionPipeline

    if options.threads is not None:
        torch.set_num_threads(options.threads)
        log.info("torch uses %d CPU threads", options.threads)
    from imagegen.model import adapters as lora

    components = {}
    if tiny_decoder is not None:
        from imagegen.model.decoder import load_tiny_decoder

        components["vae"] = load_tiny_decoder(tiny_decoder)
    if options.streaming:
        from imagegen.model.weights import streamed_components

        prepare = {}
        if adapters:  # into the UNet while it is the only component in memory
            pipeline_class = DiffusionPipeline.load_config(path)["_class_name"]
            prepare["unet"] = partial(
                lora.fuse_into_unet, getattr(import_module("diffusers"), pipeline_class),
                adapters=adapters,
            )  # fmt: skip
        components |= streamed_components(
            path, variant=variant, dtype=torch.float32, skip=frozenset(components),
            prepare=prepare,
        )  # fmt: skip
    pipe = DiffusionPipeline.from_pretrained(
        path,
        **components,
        dtype=torch.float32,
        use_safetensors=True,
        local_files_only=True,
        variant=variant,
    )
    if adapters:
        if "unet" not in components:  # loaded by diffusers (streaming off)
            lora.fuse_into_unet(type(pipe), pipe.unet, adapters)
        lora.fuse_into_text_encoders(pipe, adapters)
    pipe.to(device)
    if options.attention_slicing:
        pipe.enable_attention_slicing()
        from imagegen.model.attention import use_fused_kernel_in_slices

        for component in pipe.components.values():
            if isinstance(component, torch.nn.Module):
                use_fused_kernel_in_slices(component)
    pipe.vae.enable_slicing()
    pipe.vae.enable_tiling()
    tile = options.vae_tile
    if tile is None:
        from imagegen.model.memory import memory_limit, vae_tile_for, weights_bytes

        limit = memory_limit()
        tile = vae_tile_for(weights_bytes(pipe.components.values()), limit)
        log.info("VAE_TILE_SIZE=auto: tiles of %d pixels (memory limit %s bytes)", tile, limit)
    if tile:
        decode_in_tiles_of(pipe.vae, tile)
    pipe.set_progress_bar_config(disable=True)
    attach_prompt_cache(pipe, options.prompt_cache)
    return pipe


def load_unet(
    path: Path,
    *,
    variant: str | None,
    device: str,
    options: LoadOptions = LoadOptions(),
    pipeline_class: Any,
    adapters: Sequence[tuple[Adapter, Path]] = (),
):
    """The UNet in `path`'s `unet` folder, built as load_pipeline builds a pipeline's.

    It replaces the loaded pipeline's UNet (imagegen.model.unets)."""
    import torch
    from diffusers import UNet2DConditionModel

    from imagegen.model import adapters as lora
    from imagegen.model.weights import load_component, weight_files, weight_variant

    files = weight_files(path / "unet", variant)
    variant = weight_variant(files[0].name) if files else None
    unet = None
    if options.streaming:
        config = json.loads((path / "unet" / "config.json").read_text())
        class_name = config.get("_class_name", "UNet2DConditionModel")
        unet = load_component(
            path, "unet", "diffusers", class_name, variant=variant, dtype=torch.float32
        )
    if unet is None:  # streaming off, or names the streaming loader does not map
        unet = UNet2DConditionModel.from_pretrained(
            path, subfolder="unet", dtype=torch.float32, use_safetensors=True,
            local_files_only=True, variant=variant,
        )  # fmt: skip
    if adapters:
        lora.fuse_into_unet(pipeline_class, unet, adapters)
    unet.to(device)
    if options.attention_slicing:
        unet.set_attention_slice("auto")  # what the pipeline's enable_attention_slicing does
        from imagegen.model.attention import use_fused_kernel_in_slices

        use_fused_kernel_in_slices(unet)
    return unet.eval()


def decode_in_tiles_of(vae, side: int) -> None:
    """Makes the full VAE decode in `side`-pixel tiles where diffusers' are larger.

    An untiled SDXL decode needs 3.9 GiB over 12.9 GiB of weights; 512-pixel tiles need 1.2
    GiB (docs/performance.md)."""
    from diffusers import AutoencoderKL

    # diffusers shows type checkers a dummy AutoencoderKL without the model's attributes.
    if isinstance(vae, AutoencoderKL) and side < vae.tile_sample_min_size:  # type: ignore[attr-defined]
        scale = 2 ** (len(vae.config.block_out_channels) - 1)  # type: ignore[attr-defined]
        vae.tile_sample_min_size, vae.tile_latent_min_size = side, side // scale  # type: ignore[attr-defined]


def native_size(pipe) -> tuple[int, int]:
    side = pipe.unet.config.sample_size * pipe.vae_scale_factor
    return side, side
