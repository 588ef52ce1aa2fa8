"""VAE_DECODER: which autoencoder turns the latents into pixels.

`full` is the pipeline's own VAE, as the contract says. `tiny` is TAESD (AutoencoderTiny): a
few MB, and a far cheaper decode, at some loss of fine detail. It is pulled like an adapter,
from VAE_DECODER_REPO, whose default fits the pipeline's latent space."""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from imagegen.model.adapters import (
    REPO_RULE,
    Adapter,
    default_adapters,
    is_repo_id,
    parse_adapters,
    share_folder_name,
)

FULL, TINY = "full", "tiny"
TAESD, TAESDXL = "madebyollin/taesd", "madebyollin/taesdxl"
DECODERS_FOLDER = "decoders"
# What `AutoencoderTiny.from_pretrained(folder, use_safetensors=True)` reads: the repo's default
# fp32 weights.
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "diffusion_pytorch_model.safetensors"
DECODER_FILES = (CONFIG_FILE, WEIGHTS_FILE)


@dataclass(frozen=True)
class DecoderChoice:
    """VAE_DECODER and VAE_DECODER_REPO (the repo only matters for `tiny`)."""

    kind: str = FULL
    repo: str | None = None  # VAE_DECODER_REPO; None: chosen from the pipeline's type

    @property
    def tiny(self) -> bool:
        return self.kind == TINY

    def tiny_repo(self, model_index: dict[str, Any] | None) -> str | None:
        """The tiny decoder's repo for this model_index.json.

        None for the full decoder, or while the default awaits an unknown model_index."""
        if not self.tiny:
            return None
        if self.repo:
            return self.repo
        if model_index is None:
            return None
        return TAESDXL if is_sdxl(model_index) else TAESD


FULL_DECODER = DecoderChoice()


def is_sdxl(model_index: dict[str, Any]) -> bool:
    """SDXL pipelines are the StableDiffusionXL* classes: their latents need taesdxl."""
    return str(model_index.get("_class_name", "")).startswith("StableDiffusionXL")


def default_decoder(model_id: str, adapters: Sequence[Adapter]) -> str:
    """VAE_DECODER when unset: `tiny` for the shipped preset, `full` otherwise.

    On 2 vCPU the preset's 1024x1024 image takes 160-170 s; a fitting full decode adds 90-105
    s. That passes a request's 230 s; TAESDXL takes seconds (docs/performance.md, "Fast
    images")."""
    shipped = tuple(parse_adapters(default_adapters(model_id)))
    return TINY if shipped and tuple(adapters) == shipped else FULL


def parse_decoder(kind: str, repo: str) -> DecoderChoice:
    """VAE_DECODER and VAE_DECODER_REPO, refused at start when they cannot work."""
    if kind not in (FULL, TINY):
        raise ImproperlyConfigured(f"VAE_DECODER must be full or tiny, got {kind!r}")
    repo = repo.strip()
    if repo and not is_repo_id(repo):
        raise ImproperlyConfigured(
            f"VAE_DECODER_REPO must be a hub repo id ({REPO_RULE}), got {repo!r}"
        )
    return DecoderChoice(kind=kind, repo=repo or None)


def share_folder(repo: str) -> str:
    """Where the decoder's files lie on the share, relative to the model's directory."""
    return f"{DECODERS_FOLDER}/{share_folder_name(repo)}"


def load_tiny_decoder(folder: Path) -> Any:
    """The tiny autoencoder from its share folder: fp32, safetensors, no network.

    The pipeline's loader turns on slicing and tiling, as for the full VAE."""
    import torch
    from diffusers import AutoencoderTiny

    return AutoencoderTiny.from_pretrained(
        folder, dtype=torch.float32, use_safetensors=True, local_files_only=True
    ).eval()
