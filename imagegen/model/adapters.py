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
# The model the service ships with, and the few-step LoRA it is pulled and fused with unless
# MODEL_ADAPTERS says otherwise: SDXL base at its own defaults (20 steps with guidance: 40
# UNet calls at 1024x1024) takes many times a synchronous request's 230 s on a CPU; with this
# LoRA a request that sends only a prompt gets its preset's 4 calls without an unconditional
# pass (imagegen.generation.presets). Why this LoRA: docs/performance.md, "Fast images".
DEFAULT_MODEL_ID = "stabilityai/stable-diffusion-xl-base-1.0"
DEFAULT_MODEL_ADAPTERS = "ByteDance/SDXL-Lightning:sdxl_lightning_4step_lora.safetensors"
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


def default_adapters(model_id: str) -> str:
    """MODEL_ADAPTERS' value when the variable is absent: the default model's few-step LoRA,
    none for any other MODEL_ID (a LoRA is distilled for one base model, and another MODEL_ID
    may be any pipeline). Hub ids are case-insensitive, so the default id in any case is the
    default model; naming it explicitly (as deploy/azure.sh does) changes nothing."""
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
# An adapter is fused layer by layer, into the UNet first (a part of its layers at a time)
# and then into the text encoders, each with diffusers' LoRA loading on peft: the weights
# (read as fp32) become peft LoRA layers beside the layers they adapt (with
# `low_cpu_mem_usage`, the tensors are assigned, not copied), `fuse_lora` adds
# scale x B.A into each weight in place, and the LoRA layers are unloaded, so the pipeline
# keeps exactly the layers it had and a step costs what it did. Layer by layer is exact:
# each weight gets its own B.A only.
#
# Why the UNet in parts, and first: the model's load peaks near 1.1x its fp32 bytes
# (imagegen.model.weights), and peft's merge of one layer holds two copies of that layer's
# B.A (up to 2 x 118 MB for SD 1.5's largest convolution), on top of the adapter's weights
# (0.27 GB for SD 1.5's LCM-LoRA, 6 % of the model). Fused into the UNet before the text
# encoders and the VAE are loaded, a part at a time, none of it raises the load's peak
# (docs/performance.md has the figure).
#
# The fuse frees thousands of tensors smaller than glibc malloc's mmap threshold (32 MB at
# most): their pages would stay with the process, unused by the components loaded next (each
# one large block), and raise the load's peak by 0.05x; they are given back after each stage
# (`give_back_freed_memory`).
#
# One adapter at a time also because `fuse_lora` scales every active adapter of a layer:
# two loaded together would each get the other's scale too.

CHUNK_BYTES = 64 * 2**20  # an adapter's fp32 UNet weights loaded and fused at a time
# Where a LoRA tensor's name ends and its layer's begins, in the layouts diffusers reads:
# peft's (`.lora_A.weight`), kohya's (`.lora_down.weight`, `.alpha`, `.dora_scale`), and
# diffusers' older ones (`.to_q_lora.down.weight`, `.lora_linear_layer.down.weight`).
_LAYER_END = re.compile(
    r"[._]lora[._](?:down|up|A|B)\b|\.lora_linear_layer\.|\.alpha$|\.lora_magnitude_vector"
    r"|\.dora_scale$"
)
UNET_PREFIXES = ("lora_unet_", "unet.")  # kohya's and diffusers' names of the UNet's layers
METADATA_KEY = "lora_adapter_metadata"  # diffusers' LoraConfig of the file, when saved with it


def layer_of(name: str) -> str | None:
    """The layer a LoRA tensor belongs to (its name up to its LoRA part); None when the
    name is in no layout known here."""
    match = _LAYER_END.search(name)
    return name[: match.start()] if match else None


def lora_metadata(file: Path) -> dict[str, Any] | None:
    """diffusers' adapter metadata of the file (its LoraConfig: rank, alpha, targets)."""
    from imagegen.model.weights import read_metadata

    with open(file, "rb", buffering=0) as f:
        raw = read_metadata(f, file).get(METADATA_KEY)
    return json.loads(raw) if raw else None


def lora_parts(
    file: Path, *, unet: bool, chunk_bytes: float = CHUNK_BYTES
) -> Iterator[dict[str, Any]]:
    """The adapter's tensors for the UNet (`unet`) or for the rest, floating point as fp32,
    in parts of whole layers (every tensor of a layer in one part) of about `chunk_bytes`
    each, read from the file a part at a time without mapping it (imagegen.model.weights).
    A file with diffusers' adapter metadata comes in one part each (its LoraConfig names
    every target layer); one with a tensor name in no known layout is refused."""
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
    """Returns the pages malloc keeps after frees to the system (glibc's malloc_trim); does
    nothing where the C library has no malloc_trim."""
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
    """Fuses the adapters' UNet layers into `unet`, before (or without) a pipeline: the
    pipeline class's own conversion (`lora_state_dict`: kohya's names, SDXL's block
    numbering) and loading (`load_lora_into_unet`), then the UNet's `fuse_lora` and
    `unload_lora`, which are what the pipeline's methods call for its UNet."""
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
    """Fuses the adapters' other layers (the text encoders') into the built pipeline: its
    own conversion and `load_lora_into_text_encoder` for each of its text encoders, then
    its `fuse_lora` and `unload_lora_weights`. In one part per adapter: diffusers tells the
    layout of a text encoder's LoRA from all of its names together (a part without an
    `out_proj` layer is not recognised), and a text encoder's LoRA is small (SDXL's two at
    rank 64: about 0.1 GB in fp32). Layers that are no text encoder's stop the load."""
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
