"""Hub repos for what the model pulls beside itself: random LoRA adapters for a UNet (built
with peft) and tiny AutoencoderTiny decoders (TAESD's architecture, scaled down).

The LoRAs come in the two layouts the hub's few-step LoRAs ship in: kohya's
(`lora_unet_<module_path_with_underscores>.lora_down.weight`, `.lora_up.weight`, `.alpha`;
LCM-LoRA, Hyper-SD, SDXL-Lightning) and diffusers'/peft's
(`unet.<module.path>.lora_A.weight`, `.lora_B.weight`; diffusers' training scripts). Their
layers and shapes are what peft makes for LCM-LoRA's target modules on the UNet (see
`random_lora`).

The tiny decoders are served under the real repo names (madebyollin/taesd, taesdxl), so
the service's default choice is what the tests exercise; each repo also carries the files
the real ones have beside the two a pull needs (a pickle and the original .pth weights).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

LORA_REPO = "testorg/tiny-lora"
KOHYA_FILE = "pytorch_lora_weights.safetensors"  # SD: UNet + text encoder, kohya keys
PEFT_FILE = "peft/sd_lora.safetensors"  # SD: UNet + text encoder, peft keys, in a subfolder
METADATA_FILE = "sd_lora_alpha8.safetensors"  # SD, peft keys, fp32, diffusers' metadata (alpha 8)
SDXL_FILE = "sdxl_lora.safetensors"  # SDXL: UNet + both text encoders, kohya keys
UNKNOWN_FILE = "not_a_lora.safetensors"  # tensor names in no LoRA layout
TAESD_REPO, TAESDXL_REPO = "madebyollin/taesd", "madebyollin/taesdxl"
DECODER_FILES = ("config.json", "diffusion_pytorch_model.safetensors")

# The modules diffusers' LCM-LoRA distillation script adapts (r=64 for the published
# LCM-LoRAs): attention projections, feed-forward, resnet convolutions and time
# projections, the down- and upsamplers' convolutions.
LCM_LORA_TARGETS = (
    "to_q", "to_k", "to_v", "to_out.0", "proj_in", "proj_out", "ff.net.0.proj", "ff.net.2",
    "conv1", "conv2", "conv_shortcut", "downsamplers.0.conv", "upsamplers.0.conv",
    "time_emb_proj",
)  # fmt: skip
# What diffusers' LoRA training scripts adapt in a CLIP text encoder.
TEXT_ENCODER_TARGETS = ("q_proj", "k_proj", "v_proj", "out_proj")


def lora_shapes(
    model_config: dict | Path, *, rank: int, targets: tuple[str, ...] = LCM_LORA_TARGETS
) -> dict[str, torch.Size]:
    """{peft key: shape} of the LoRA peft builds for a model of this config: a UNet's config
    (a dict), or a transformers text encoder's folder. The model is made on the meta device
    (no memory, also for SD 1.5's 3.4 GB UNet), peft injects its LoRA layers, and its state
    dict names them (`down_blocks.1.attentions.0.proj_in.lora_A.weight`)."""
    from accelerate import init_empty_weights
    from diffusers import UNet2DConditionModel
    from peft import LoraConfig, get_peft_model_state_dict, inject_adapter_in_model

    with init_empty_weights():
        if isinstance(model_config, dict):
            model = UNet2DConditionModel.from_config(model_config)
        else:
            import transformers

            config = transformers.AutoConfig.from_pretrained(model_config)
            model = getattr(transformers, config.architectures[0])(config)
    config = LoraConfig(r=rank, lora_alpha=rank, target_modules=list(targets))
    inject_adapter_in_model(config, model, low_cpu_mem_usage=True)
    return {key: tensor.shape for key, tensor in get_peft_model_state_dict(model).items()}


def random_lora(
    unet_config: dict,
    *,
    rank: int,
    alpha: float,
    seed: int,
    strength: float,
    text_encoders: dict[str, Path] | None = None,
) -> dict[str, torch.Tensor]:
    """A random LoRA for a UNet of this config (and for the text encoders in these folders,
    by prefix), in peft's layout with diffusers' `unet.` / `text_encoder.` prefixes. A is
    drawn like a fresh layer's weight (uniform, std 1/sqrt(3 fan_in)); B is normal with
    the std that makes (alpha/rank) B.A about `strength` times the size of a freshly
    initialised weight of the layer (both have that std), so a small strength is a LoRA of
    a plausible size and a large one changes the output visibly."""
    generator = torch.Generator().manual_seed(seed)
    up_std = strength * rank**0.5 / alpha
    shapes = {f"unet.{k}": v for k, v in lora_shapes(unet_config, rank=rank).items()}
    for prefix, folder in (text_encoders or {}).items():
        found = lora_shapes(folder, rank=rank, targets=TEXT_ENCODER_TARGETS)
        shapes |= {f"{prefix}.{k}": v for k, v in found.items()}
    state = {}
    for key, shape in shapes.items():
        if ".lora_A." in key:
            fan_in = shape[1:].numel()
            bound = 1 / fan_in**0.5  # uniform(-b, b) has std b / sqrt(3)
            tensor = torch.rand(shape, generator=generator) * (2 * bound) - bound
        else:
            tensor = torch.randn(shape, generator=generator) * up_std
        state[key] = tensor
    return state


def to_kohya(state: dict[str, torch.Tensor], alpha: float) -> dict[str, torch.Tensor]:
    """diffusers' own peft -> kohya conversion, with `alpha` as every layer's alpha (the
    conversion writes alpha = rank)."""
    from diffusers.utils.state_dict_utils import convert_state_dict_to_kohya

    kohya = convert_state_dict_to_kohya(state)
    return {k: torch.tensor(float(alpha)) if k.endswith(".alpha") else v for k, v in kohya.items()}


def save_lora(
    state: dict[str, torch.Tensor], file: Path, dtype=torch.float16, metadata: dict | None = None
) -> Path:
    """Saves as the hub's LoRAs are: safetensors, floating-point tensors in `dtype` (fp16)."""
    from safetensors.torch import save_file

    file.parent.mkdir(parents=True, exist_ok=True)
    save_file(
        {k: v.to(dtype).contiguous() if k.endswith("weight") else v for k, v in state.items()},
        file,
        metadata={"format": "pt", **(metadata or {})},
    )
    return file


def diffusers_metadata(rank: int, alpha: float, state: dict[str, torch.Tensor]) -> dict[str, str]:
    """What diffusers' save_lora_weights writes beside a LoRA trained with peft: each
    component's LoraConfig (rank, alpha, target modules) under `lora_adapter_metadata`."""
    from peft import LoraConfig

    document = {}
    for prefix in sorted({key.split(".", 1)[0] for key in state}):
        targets = {k.split(".", 1)[1].rsplit(".lora_", 1)[0] for k in state if k.startswith(prefix)}
        config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=sorted(targets)).to_dict()
        for key, value in config.items():
            document[f"{prefix}.{key}"] = sorted(value) if isinstance(value, set) else value
    return {"lora_adapter_metadata": json.dumps(document, sort_keys=True, default=str)}


def build_tiny_loras(hub_root: Path, *, sd_repo: str, sdxl_repo: str) -> Path:
    """testorg/tiny-lora in `hub_root`, with LoRAs (rank 4) for the tiny SD and SDXL models
    of those repos; built once."""
    dest = hub_root / LORA_REPO
    if (dest / "README.md").exists():
        return dest
    sd, sdxl = hub_root / sd_repo, hub_root / sdxl_repo
    sd_unet = json.loads((sd / "unet" / "config.json").read_text())
    sdxl_unet = json.loads((sdxl / "unet" / "config.json").read_text())
    sd_text = {"text_encoder": sd / "text_encoder"}
    kohya = random_lora(sd_unet, rank=4, alpha=2.0, seed=1, strength=0.5, text_encoders=sd_text)
    save_lora(to_kohya(kohya, alpha=2.0), dest / KOHYA_FILE)
    peft = random_lora(sd_unet, rank=4, alpha=4.0, seed=2, strength=0.5, text_encoders=sd_text)
    save_lora(peft, dest / PEFT_FILE)
    alpha8 = random_lora(sd_unet, rank=4, alpha=8.0, seed=4, strength=0.5, text_encoders=sd_text)
    save_lora(alpha8, dest / METADATA_FILE, torch.float32, diffusers_metadata(4, 8.0, alpha8))
    sdxl_text = {"text_encoder": sdxl / "text_encoder", "text_encoder_2": sdxl / "text_encoder_2"}
    xl = random_lora(sdxl_unet, rank=4, alpha=4.0, seed=3, strength=0.5, text_encoders=sdxl_text)
    save_lora(to_kohya(xl, alpha=4.0), dest / SDXL_FILE)
    save_lora({"model.layer.weight": torch.ones(4, 4)}, dest / UNKNOWN_FILE)
    (dest / "README.md").write_text("---\nlibrary_name: diffusers\n---\n# Tiny random LoRAs\n")
    return dest


def build_tiny_decoder(dest: Path, *, seed: int) -> Path:
    """An AutoencoderTiny with TAESD's layout (four blocks: latents to pixels is 8x, as
    AutoencoderTiny's tiled decode assumes) but 8 channels, saved as diffusers does
    (config.json, fp32 safetensors), beside the files a pull must leave on the hub."""
    from diffusers import AutoencoderTiny

    if (dest / DECODER_FILES[1]).exists():
        return dest
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        decoder = AutoencoderTiny(
            encoder_block_out_channels=(8, 8, 8, 8),
            decoder_block_out_channels=(8, 8, 8, 8),
            num_encoder_blocks=(1, 1, 1, 1),
            num_decoder_blocks=(1, 1, 1, 1),
        )
    decoder.save_pretrained(dest, safe_serialization=True)
    (dest / "diffusion_pytorch_model.bin").write_bytes(bytes(4096))
    (dest / "taesd_decoder.pth").write_bytes(bytes(4096))
    (dest / ".gitattributes").write_text("*.safetensors filter=lfs diff=lfs merge=lfs -text\n")
    return dest


def build_adapter_repos(hub_root: Path, *, sd_repo: str, sdxl_repo: str) -> None:
    """Every repo above, in `hub_root` (idempotent: tests of several modules call it)."""
    build_tiny_loras(hub_root, sd_repo=sd_repo, sdxl_repo=sdxl_repo)
    build_tiny_decoder(hub_root / TAESD_REPO, seed=11)
    build_tiny_decoder(hub_root / TAESDXL_REPO, seed=12)
