"""LoRA adapters named by MODEL_ADAPTERS, fused into the fp32 UNet at load.

Fused, a step costs what it cost without them. MODEL_ADAPTERS is a comma-separated list of
`repo:file[:scale]`, for example
`latent-consistency/lcm-lora-sdxl:pytorch_lora_weights.safetensors`.

A LoRA is trained for one base model, so it lies in that model's directory
(`Adapter.share_path`). The model's manifest lists and checks it like the model's own files."""

import ctypes
import json
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

FORM = "repo:file[:scale], comma-separated (e.g. org/name:weights.safetensors:1.0)"
# The default model and the few-step LoRA fused with it unless MODEL_ADAPTERS says otherwise. SDXL
# base at its defaults (20 steps with guidance: 40 UNet calls at 1024x1024) takes many times a
# synchronous request's 230 s on a CPU. With this LoRA a prompt-only request gets 4 calls and no
# unconditional pass (imagegen.generation.presets). Why this LoRA: docs/performance.md, "Fast
# images".
DEFAULT_MODEL_ID = "stabilityai/stable-diffusion-xl-base-1.0"
DEFAULT_MODEL_ADAPTERS = "ByteDance/SDXL-Lightning:sdxl_lightning_4step_lora.safetensors"
ADAPTERS_FOLDER = "adapters"
# The hub's repo id rule (validate_repo_id), with the org required. The hub refuses "--" and "..",
# so `org--name` names one repo only.
_REPO = re.compile(r"[\w.-]{1,96}/[\w.-]{1,96}")
REPO_RULE = "org/name: letters, digits, '-', '_', '.'; no '--' or '..'"


def is_repo_id(repo: str) -> bool:
    return bool(_REPO.fullmatch(repo)) and "--" not in repo and ".." not in repo


class AdapterError(ValueError):
    """An adapter whose layers are not this model's."""


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


def default_adapters(model_id: str) -> str:
    """MODEL_ADAPTERS when unset: the default model's few-step LoRA, else none.

    A LoRA fits one base model. Hub ids are case-insensitive."""
    return DEFAULT_MODEL_ADAPTERS if model_id.casefold() == DEFAULT_MODEL_ID.casefold() else ""


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
#
# Each adapter is fused layer by layer with diffusers' LoRA loading on peft: the UNet first, a part
# at a time, then the text encoders. The weights, read as fp32, become peft LoRA layers;
# `low_cpu_mem_usage` assigns the tensors rather than copying. `fuse_lora` adds scale x B.A into
# each weight in place. Then the LoRA layers are unloaded. So the pipeline keeps exactly its layers,
# and a step costs what it did. Layer by layer is exact.
#
# Why the UNet first, in parts: the load peaks near 1.1x the fp32 bytes (imagegen.model.weights).
# peft's merge of one layer holds two copies of its B.A: up to 2 x 118 MB for SD 1.5's largest
# convolution. The adapter adds 0.27 GB for SD 1.5's LCM-LoRA (6 % of the model). Fused before the
# text encoders and VAE load, none of it raises the peak (docs/performance.md has the figure).
#
# The fuse frees thousands of tensors under glibc's mmap threshold (32 MB at most). Their pages
# would stay with the process and raise the peak by 0.05x. So they are given back after each stage
# (`give_back_freed_memory`).
#
# One adapter at a time, too: `fuse_lora` scales every active adapter of a layer. Two loaded
# together would each get the other's scale.

CHUNK_BYTES = 64 * 2**20  # an adapter's fp32 UNet weights loaded and fused at a time
# Where a LoRA tensor's name ends and its layer's begins, in the layouts diffusers reads: peft's
# (`.lora_A.weight`), kohya's (`.lora_down.weight`, `.alpha`, `.dora_scale`), and diffusers' older
# ones (`.to_q_lora.down.weight`, `.lora_linear_layer.down.weight`).
_LAYER_END = re.compile(
    r"[._]lora[._](?:down|up|A|B)\b|\.lora_linear_layer\.|\.alpha$|\.lora_magnitude_vector"
    r"|\.dora_scale$"
)
UNET_PREFIXES = ("lora_unet_", "unet.")  # kohya's and diffusers' names of the UNet's layers
METADATA_KEY = "lora_adapter_metadata"  # diffusers' LoraConfig of the file, when saved with it


def layer_of(name: str) -> str | None:
    """The layer a LoRA tensor belongs to; None for a name in no known layout."""
    match = _LAYER_END.search(name)
    return name[: match.start()] if match else None


def lora_metadata(file: Path) -> dict[str, Any] | None:
    """diffusers' adapter metadata of the file: its LoraConfig (rank, alpha, targets)."""
    from imagegen.model.weights import read_metadata

    with open(file, "rb", buffering=0) as f:
        raw = read_metadata(f, file).get(METADATA_KEY)
    return json.loads(raw) if raw else None


def lora_parts(
    file: Path, *, unet: bool, chunk_bytes: float = CHUNK_BYTES
) -> Iterator[dict[str, Any]]:
    """The adapter's UNet tensors (`unet`) or the rest, as fp32, in parts of whole layers.

    Parts of about `chunk_bytes` are read one at a time. Unknown tensor names are refused."""
    import torch

    from imagegen.model.weights import read_entry, read_header

    if lora_metadata(file) is not None:
        chunk_bytes = math.inf
    with open(file, "rb", buffering=0) as f:
        layers: dict[str, list] = {}
        for entry in read_header(f, file):
            layer = layer_of(entry.name)
            if layer is None:
                raise AdapterError(
                    f"{file.name}: {entry.name!r} is in no LoRA layout known here (kohya's "
                    "lora_unet_*/lora_te*_*.lora_down|lora_up|alpha, diffusers' "
                    "unet.*/text_encoder*.*.lora_A|lora_B)"
                )
            layers.setdefault(layer, []).append(entry)
        part: list = []
        size = 0
        for layer, entries in layers.items():
            if layer.startswith(UNET_PREFIXES) != unet:
                continue
            if part and size + sum(4 * e.count for e in entries) > chunk_bytes:
                yield {e.name: read_entry(f, e, torch.float32) for e in part}
                part, size = [], 0
            part += entries
            size += sum(4 * e.count for e in entries)
        if part:
            yield {e.name: read_entry(f, e, torch.float32) for e in part}


def lora_layers(*modules: Any) -> int:
    """peft's LoRA layers in these modules, or in a pipeline's torch components."""
    import torch
    from peft.tuners.tuners_utils import BaseTunerLayer

    if len(modules) == 1 and not isinstance(modules[0], torch.nn.Module):
        modules = tuple(c for c in modules[0].components.values() if isinstance(c, torch.nn.Module))
    return sum(isinstance(m, BaseTunerLayer) for module in modules for m in module.modules())


def give_back_freed_memory() -> None:
    """Returns malloc's freed pages to the system (glibc's malloc_trim), where there is one."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)


def _refused(adapter: Adapter, exc: Exception) -> AdapterError:
    return AdapterError(f"MODEL_ADAPTERS {adapter.label}: {exc}")


def _parts(adapter: Adapter, file: Path, *, unet: bool, chunk_bytes: float) -> Iterator[dict]:
    """lora_parts, its refusal naming the adapter."""
    try:
        yield from lora_parts(file, unet=unet, chunk_bytes=chunk_bytes)
    except AdapterError as exc:
        raise _refused(adapter, exc) from exc


def fuse_into_unet(
    pipeline_class: Any,
    unet: Any,
    adapters: Sequence[tuple[Adapter, Path]],
    chunk_bytes: float = CHUNK_BYTES,
) -> None:
    """Fuses the adapters' UNet layers into `unet`, before any pipeline exists.

    It calls what the pipeline's own LoRA methods call."""
    for index, (adapter, file) in enumerate(adapters):
        metadata = lora_metadata(file)
        parts = _parts(adapter, file, unet=True, chunk_bytes=chunk_bytes)
        for part_index, part in enumerate(parts):
            name = f"adapter_{index}_unet_{part_index}"
            try:
                state, alphas = pipeline_class.lora_state_dict(part, unet_config=unet.config)
                pipeline_class.load_lora_into_unet(
                    state, alphas, unet=unet, adapter_name=name, low_cpu_mem_usage=True,
                    metadata=metadata,
                )  # fmt: skip
            except (ValueError, KeyError, RuntimeError, AttributeError) as exc:
                raise _refused(adapter, exc) from exc
            del part, state
            if not lora_layers(unet):
                raise _refused(adapter, ValueError("none of its layers is a layer of this UNet"))
            unet.fuse_lora(lora_scale=adapter.scale, adapter_names=[name])
            unet.unload_lora()
            if left := lora_layers(unet):
                raise _refused(adapter, ValueError(f"{left} LoRA layers left"))
    give_back_freed_memory()


def fuse_into_text_encoders(pipe: Any, adapters: Sequence[tuple[Adapter, Path]]) -> None:
    """Fuses the adapters' text encoder layers into the built pipeline, one part per adapter.

    diffusers reads the layout from all names at once; these LoRAs are small (0.1 GB)."""
    encoders = [
        name
        for name in pipe._lora_loadable_modules
        if name != "unet" and getattr(pipe, name, None) is not None
    ]
    for index, (adapter, file) in enumerate(adapters):
        metadata = lora_metadata(file)
        parts = _parts(adapter, file, unet=False, chunk_bytes=math.inf)
        for part_index, part in enumerate(parts):
            name = f"adapter_{index}_text_{part_index}"
            try:
                state, alphas = pipe.lora_state_dict(part, unet_config=pipe.unet.config)
                for encoder in encoders:
                    pipe.load_lora_into_text_encoder(
                        state, alphas, text_encoder=getattr(pipe, encoder), prefix=encoder,
                        adapter_name=name, _pipeline=pipe, low_cpu_mem_usage=True,
                        metadata=metadata,
                    )  # fmt: skip
            except (ValueError, KeyError, RuntimeError, AttributeError) as exc:
                raise _refused(adapter, exc) from exc
            del part, state
            if not lora_layers(pipe):
                raise _refused(adapter, ValueError("none of its layers is a layer of this model"))
            pipe.fuse_lora(components=encoders, lora_scale=adapter.scale, adapter_names=[name])
            pipe.unload_lora_weights()
            if left := lora_layers(pipe):
                raise _refused(adapter, ValueError(f"{left} LoRA layers left"))
    give_back_freed_memory()


def fuse_adapters(
    pipe: Any, adapters: Sequence[tuple[Adapter, Path]], chunk_bytes: float = CHUNK_BYTES
) -> None:
    """Fuses the adapters into a built pipeline: its UNet, then its text encoders."""
    fuse_into_unet(type(pipe), pipe.unet, adapters, chunk_bytes)
    fuse_into_text_encoders(pipe, adapters)
