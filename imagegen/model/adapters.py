"""LoRA adapters named by MODEL_ADAPTERS: fetched onto the share beside the model and fused
into the fp32 UNet at load, so a step costs what it cost without them.

MODEL_ADAPTERS is a comma-separated list of `repo:file[:scale]`, for example
`latent-consistency/lcm-lora-sdxl:pytorch_lora_weights.safetensors` or
`ByteDance/SDXL-Lightning:sdxl_lightning_4step_lora.safetensors:1.0`.

On the share an adapter lies inside the model's directory, at
`adapters/<org>--<name>/<file>` (`Adapter.share_path`): a LoRA is trained for one base model,
so it belongs to that model's copy, the model's manifest lists it like the model's own files
(one manifest written last covers both, `pull_model --check` hashes both), and the pull's
clean-up removes an adapter that left MODEL_ADAPTERS with the same code that removes a file
that left the model.
"""

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

FORM = "repo:file[:scale], comma-separated (e.g. org/name:weights.safetensors:1.0)"
ADAPTERS_FOLDER = "adapters"
# The hub's rule for a repo id (huggingface_hub's validate_repo_id), here with the org
# required; "--" and ".." are refused by the hub too, so `org--name` names one repo only.
_REPO = re.compile(r"[\w.-]{1,96}/[\w.-]{1,96}")
REPO_RULE = "org/name: letters, digits, '-', '_', '.'; no '--' or '..'"


def is_repo_id(repo: str) -> bool:
    return bool(_REPO.fullmatch(repo)) and "--" not in repo and ".." not in repo


class AdapterError(ValueError):
    """An adapter that cannot be fused into this model (its layers are not the model's)."""


@dataclass(frozen=True)
class Adapter:
    repo: str  # the hub repository, org/name
    file: str  # a .safetensors file in it
    scale: float = 1.0  # the LoRA's weight when fused

    @property
    def label(self) -> str:
        return f"{self.repo}:{self.file}"

    @property
    def share_path(self) -> str:
        """Where the file lies on the share, relative to the model's directory."""
        return f"{ADAPTERS_FOLDER}/{share_folder_name(self.repo)}/{self.file}"


def share_folder_name(repo: str) -> str:
    """`org/name` -> `org--name`, as huggingface_hub names a repo's folder."""
    return repo.replace("/", "--")


def parse_adapters(raw: str) -> tuple[Adapter, ...]:
    """The adapters of a MODEL_ADAPTERS value; a malformed entry stops the service at start."""
    adapters: list[Adapter] = []
    for entry in (part.strip() for part in raw.split(",")):
        if not entry:
            continue
        parts = entry.split(":")
        if len(parts) not in (2, 3) or "/" not in parts[0] or not parts[1]:
            raise ImproperlyConfigured(f"MODEL_ADAPTERS: {entry!r} is not {FORM}")
        repo, file = parts[0], parts[1]
        if not is_repo_id(repo):
            raise ImproperlyConfigured(
                f"MODEL_ADAPTERS: {repo!r} in {entry!r} is not a hub repo id ({REPO_RULE})"
            )
        if not file.endswith(".safetensors"):
            raise ImproperlyConfigured(f"MODEL_ADAPTERS: {entry!r} must name a .safetensors file")
        if file.startswith("/") or "\\" in file or {"", ".", ".."} & set(file.split("/")):
            raise ImproperlyConfigured(
                f"MODEL_ADAPTERS: the file in {entry!r} must be a path inside the repo "
                "(no leading '/', no '.' or '..' or empty parts, no '\\')"
            )
        try:
            scale = float(parts[2]) if len(parts) == 3 else 1.0
        except ValueError:
            raise ImproperlyConfigured(
                f"MODEL_ADAPTERS: scale in {entry!r} is not a number"
            ) from None
        if not math.isfinite(scale):
            raise ImproperlyConfigured(f"MODEL_ADAPTERS: scale in {entry!r} must be finite")
        adapter = Adapter(repo=repo, file=file, scale=scale)
        if any(a.label == adapter.label for a in adapters):
            raise ImproperlyConfigured(
                f"MODEL_ADAPTERS: {adapter.label} is named twice (one entry per file)"
            )
        adapters.append(adapter)
    return tuple(adapters)


# --- fusing ----------------------------------------------------------------------------------


def lora_layers(pipe: Any) -> int:
    """peft's LoRA layers left in the pipeline's torch components."""
    import torch
    from peft.tuners.tuners_utils import BaseTunerLayer

    return sum(
        isinstance(module, BaseTunerLayer)
        for component in pipe.components.values()
        if isinstance(component, torch.nn.Module)
        for module in component.modules()
    )


def fuse_adapters(pipe: Any, adapters: Sequence[tuple[Adapter, Path]]) -> None:
    """Fuses each (adapter, its file on the share) into the pipeline's fp32 weights.

    One adapter at a time: its weights are read as fp32 into one block (the streaming
    reader, imagegen.model.weights); diffusers' LoRA loading with peft puts them beside the
    layers they adapt (with `low_cpu_mem_usage`, diffusers' default with peft, the tensors
    are assigned, not copied); `fuse_lora` adds scale x B.A into each weight in place; and
    `unload_lora_weights` removes the LoRA layers, so the pipeline has exactly the layers it
    had before and a step costs what it did. At the peak, one adapter's fp32 weights are in
    memory beside the model. One at a time also because `fuse_lora` scales every active
    adapter of a layer: two loaded together would each get the other's scale too.
    """
    import torch

    from imagegen.model.weights import read_safetensors

    for index, (adapter, file) in enumerate(adapters):
        name = f"adapter_{index}"
        state = dict(read_safetensors(file, torch.float32))
        try:
            pipe.load_lora_weights(state, adapter_name=name)
        except (ValueError, KeyError, RuntimeError) as exc:
            raise AdapterError(f"MODEL_ADAPTERS {adapter.label}: {exc}") from exc
        finally:
            del state
        if not lora_layers(pipe):
            raise AdapterError(
                f"MODEL_ADAPTERS {adapter.label}: none of its layers is a layer of this model"
            )
        pipe.fuse_lora(
            components=list(pipe._lora_loadable_modules),
            lora_scale=adapter.scale,
            adapter_names=[name],
        )
        pipe.unload_lora_weights()
        if left := lora_layers(pipe):
            raise AdapterError(f"MODEL_ADAPTERS {adapter.label}: {left} LoRA layers left")
