"""Build tiny, randomly initialised diffusers repos on disk.

Tests exercise the real download/cache/load path offline, so they need a directory that
looks like a hub repo (fp32 weights, an fp16 variant, decoy formats a downloader must
skip) but is small and fast enough to build per test session.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import torch
from diffusers import (
    AutoencoderKL,
    DiffusionPipeline,
    EulerDiscreteScheduler,
    PNDMScheduler,
    StableDiffusionPipeline,
    StableDiffusionXLPipeline,
    UNet2DConditionModel,
)
from transformers import (
    CLIPTextConfig,
    CLIPTextModel,
    CLIPTextModelWithProjection,
    CLIPTokenizer,
)

BOS, EOS = "<|startoftext|>", "<|endoftext|>"

# Words that get whole-word BPE merges, so prompts tokenize into realistic mixes of word
# and byte tokens. Anything else falls back to single bytes, which are always in the vocab.
_WORDS = (
    "a an the of and in on with at by for to from is are photo painting portrait picture "
    "image drawing style art cat dog bird horse fox squirrel man woman person city street "
    "forest mountain river lake sea sky sunset night light red blue green white black "
    "golden small big old new beautiful detailed realistic eating burger astronaut riding"
)

_HIDDEN = 32
_CHANNELS = (16, 32)
_DECOY = bytes(4096)


def _bytes_to_unicode() -> list[str]:
    """GPT-2/CLIP byte-level alphabet: one printable character per byte value."""
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)}
    printable |= set(range(ord("®"), ord("ÿ") + 1))
    shifted = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(shifted)) for b in range(256)]


def _vocab_and_merges() -> tuple[dict[str, int], list[str]]:
    """A CLIP-style byte-level BPE vocab: bytes, bytes+'</w>', word merges, then specials."""
    alphabet = _bytes_to_unicode()
    tokens = alphabet + [c + "</w>" for c in alphabet]
    merges: list[str] = []
    for word in _WORDS.split():
        symbols = [*word[:-1], word[-1] + "</w>"]
        merged = symbols[0]
        for symbol in symbols[1:]:
            rule = f"{merged} {symbol}"
            merged += symbol
            if rule not in merges:
                merges.append(rule)
                tokens.append(merged)
    tokens += [BOS, EOS]
    return {token: i for i, token in enumerate(dict.fromkeys(tokens))}, merges


def _write_tokenizer(folder: Path) -> CLIPTokenizer:
    """Write the vocab.json/merges.txt layout SD repos ship (not tokenizer.json) and load it."""
    vocab, merges = _vocab_and_merges()
    special = {"bos_token": BOS, "eos_token": EOS, "pad_token": EOS, "unk_token": EOS}
    config = {"tokenizer_class": "CLIPTokenizer", "model_max_length": 77, "do_lower_case": True}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", "utf-8")
    (folder / "special_tokens_map.json").write_text(json.dumps(special, indent=2))
    (folder / "tokenizer_config.json").write_text(json.dumps(config | special, indent=2))
    return CLIPTokenizer.from_pretrained(folder)


def _text_config(tokenizer: CLIPTokenizer) -> CLIPTextConfig:
    return CLIPTextConfig(
        vocab_size=len(tokenizer),
        hidden_size=_HIDDEN,
        intermediate_size=37,
        projection_dim=_HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=77,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def _vae() -> AutoencoderKL:
    return AutoencoderKL(
        block_out_channels=_CHANNELS,
        down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2,
        latent_channels=4,
        norm_num_groups=8,
        sample_size=64,
    )


def _unet(**extra: object) -> UNet2DConditionModel:
    return UNet2DConditionModel(
        block_out_channels=_CHANNELS,
        layers_per_block=1,
        sample_size=32,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        attention_head_dim=(2, 4),
        norm_num_groups=8,
        **extra,
    )


def _sd(work: Path, in_channels: int = 4) -> DiffusionPipeline:
    tokenizer = _write_tokenizer(work / "tokenizer")
    return StableDiffusionPipeline(
        vae=_vae(),
        text_encoder=CLIPTextModel(_text_config(tokenizer)),
        tokenizer=tokenizer,
        unet=_unet(cross_attention_dim=_HIDDEN, in_channels=in_channels),
        scheduler=PNDMScheduler(
            beta_start=0.00085,
            beta_end=0.012,
            beta_schedule="scaled_linear",
            skip_prk_steps=True,
            set_alpha_to_one=False,
            steps_offset=1,
        ),
        safety_checker=None,
        feature_extractor=None,
        image_encoder=None,
        requires_safety_checker=False,
    )


def _sdxl(work: Path) -> DiffusionPipeline:
    tokenizer = _write_tokenizer(work / "tokenizer")
    tokenizer_2 = _write_tokenizer(work / "tokenizer_2")
    time_embed_dim = 8
    return StableDiffusionXLPipeline(
        vae=_vae(),
        text_encoder=CLIPTextModel(_text_config(tokenizer)),
        text_encoder_2=CLIPTextModelWithProjection(_text_config(tokenizer_2)),
        tokenizer=tokenizer,
        tokenizer_2=tokenizer_2,
        unet=_unet(
            cross_attention_dim=2 * _HIDDEN,  # both encoders' hidden states are concatenated
            use_linear_projection=True,
            addition_embed_type="text_time",
            addition_time_embed_dim=time_embed_dim,
            # six micro-conditioning ids (sizes, crop, target) plus text_encoder_2's pooled output
            projection_class_embeddings_input_dim=6 * time_embed_dim + _HIDDEN,
        ),
        scheduler=EulerDiscreteScheduler(
            beta_start=0.00085,
            beta_end=0.012,
            beta_schedule="scaled_linear",
            steps_offset=1,
            timestep_spacing="leading",
        ),
        image_encoder=None,
        feature_extractor=None,
    )


# What a pipeline needs of the "sd" layout with the fp16 variant: no decoys (.bin, msgpack,
# ONNX, fp32 copies).
SD_FP16_FILES = frozenset({
    "model_index.json",
    "scheduler/scheduler_config.json",
    "text_encoder/config.json",
    "text_encoder/model.fp16.safetensors",
    "tokenizer/merges.txt",
    "tokenizer/special_tokens_map.json",
    "tokenizer/tokenizer_config.json",
    "tokenizer/vocab.json",
    "unet/config.json",
    "unet/diffusion_pytorch_model.fp16.safetensors",
    "vae/config.json",
    "vae/diffusion_pytorch_model.fp16.safetensors",
})  # fmt: skip
# "sd-inpaint": an inpainting checkpoint of "sd", as SD 1.5's is of SD 1.5: the same layout,
# its UNet taking 9 input channels (latents, mask, masked image's latents).
_LAYOUTS = {"sd": _sd, "sdxl": _sdxl, "sd-inpaint": lambda work: _sd(work, in_channels=9)}

_GITATTRIBUTES = "".join(
    f"*.{ext} filter=lfs diff=lfs merge=lfs -text\n"
    for ext in ("bin", "msgpack", "onnx", "safetensors", "pt", "ckpt")
)


def _add_decoys(dest: Path) -> None:
    """Add the formats a safetensors+fp16 downloader must skip, plus usual repo clutter."""
    for weights in sorted(dest.glob("*/*.safetensors")):
        if weights.name.endswith(".fp16.safetensors"):
            continue
        folder = weights.parent
        is_diffusers_model = weights.name.startswith("diffusion_")
        pickle = "diffusion_pytorch_model.bin" if is_diffusers_model else "pytorch_model.bin"
        flax = "diffusion_flax_model.msgpack" if is_diffusers_model else "flax_model.msgpack"
        (folder / pickle).write_bytes(_DECOY)
        (folder / flax).write_bytes(_DECOY)
    (dest / "onnx").mkdir(exist_ok=True)
    (dest / "onnx" / "model.onnx").write_bytes(_DECOY)
    (dest / "README.md").write_text("---\nlibrary_name: diffusers\n---\n# Tiny random pipeline\n")
    (dest / ".gitattributes").write_text(_GITATTRIBUTES)


def build_tiny_pipeline(dest: Path, *, layout: str = "sd", seed: int = 0) -> Path:
    """Write a hub-like diffusers repo with random weights to `dest` and return it.

    fp32 weights are the default files and `*.fp16.safetensors` the variant; only the
    weight files of the fp16 save are kept so configs still describe the fp32 default.
    Tokenizer folders hold the hand-written vocab.json/merges.txt, like SD repos.
    """
    if layout not in _LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}, expected one of {sorted(_LAYOUTS)}")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, torch.random.fork_rng(devices=[]):
        work = Path(tmp)
        torch.manual_seed(seed)  # fork_rng keeps the caller's global RNG untouched
        pipe = _LAYOUTS[layout](work)
        pipe.save_pretrained(dest, safe_serialization=True)
        for name in ("tokenizer", "tokenizer_2"):  # transformers 5 would write tokenizer.json
            if (work / name).is_dir():
                shutil.rmtree(dest / name)
                shutil.copytree(work / name, dest / name)
        pipe.to(torch.float16).save_pretrained(
            work / "fp16", safe_serialization=True, variant="fp16"
        )
        for weights in (work / "fp16").glob("*/*.fp16.safetensors"):
            shutil.copy2(weights, dest / weights.relative_to(work / "fp16"))
    _add_decoys(dest)
    return dest


def tree_files(dest: Path) -> list[tuple[str, int]]:
    """(relative posix path, size) of every file under `dest`, sorted, for exact assertions."""
    dest = Path(dest)
    return sorted(
        (path.relative_to(dest).as_posix(), path.stat().st_size)
        for path in dest.rglob("*")
        if path.is_file()
    )
