"""LoRAs a prompt names per request: LORAS's entries, pulled from the hub onto the share, and the
`*.safetensors` files an operator drops into `<MODEL_DIR>/loras/` (most LoRAs come from sites
that are not a hub).

A LoRA is trained for one model family. Names alone mislead (a small SD UNet's layer names are
SDXL's too), so a LoRA fits a model when every one of its layers is a layer of that model's UNet
or text encoders with the input and output sizes the LoRA's matrices have."""

import json
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagegen.model.adapters import REPO_RULE, is_repo_id, share_folder_name
from imagegen.model.share import complete_manifest, sha256_of

LORAS_FOLDER = "loras"  # under MODEL_DIR: the pulled repos' folders, and dropped files
FORM = "repo:file[=name], comma-separated (e.g. org/name:style.safetensors=style)"
_NAME = re.compile(r"[\w.+-]{1,96}")
NAME_RULE = "letters, digits, '_', '-', '.', '+' (no ':' or '>', which end a prompt's tag)"


@dataclass(frozen=True)
class LoraEntry:
    """One LORAS entry as written: a .safetensors file in a hub repo, offered as `name`."""

    repo: str
    file: str
    name: str

    @property
    def folder(self) -> str:
        """The repo's folder on the share, relative to MODEL_DIR."""
        return f"{LORAS_FOLDER}/{share_folder_name(self.repo)}"


def parse_loras(raw: str) -> tuple[LoraEntry, ...]:
    """LORAS's entries, in order. Raises ValueError naming the first malformed entry."""
    entries: list[LoraEntry] = []
    for written in raw.split(","):
        text = written.strip()
        if not text:
            continue
        spec, _, name = text.partition("=")
        repo, colon, file = spec.strip().partition(":")
        repo, file = repo.strip(), file.strip()
        if not colon or not file:
            raise ValueError(f"LORAS: {text!r} is not {FORM}")
        if not is_repo_id(repo):
            raise ValueError(f"LORAS: {repo!r} in {text!r} is not a hub repo id ({REPO_RULE})")
        if not file.endswith(".safetensors"):
            raise ValueError(f"LORAS: {text!r} must name a .safetensors file")
        if file.startswith("/") or "\\" in file or {"", ".", ".."} & set(file.split("/")):
            raise ValueError(
                f"LORAS: the file in {text!r} must be a path inside the repo "
                "(no leading '/', no '.' or '..' or empty parts, no '\\')"
            )
        name = name.strip() or Path(file).stem
        if not _NAME.fullmatch(name):
            raise ValueError(f"LORAS: the name {name!r} in {text!r} is not a name ({NAME_RULE})")
        if any(e.name.lower() == name.lower() for e in entries):
            raise ValueError(f"LORAS: the name {name!r} is given twice (add '=name' to one)")
        entries.append(LoraEntry(repo=repo, file=file, name=name))
    return tuple(entries)


def repo_path(model_dir: Path, repo: str) -> Path:
    return Path(model_dir) / LORAS_FOLDER / share_folder_name(repo)


def placed_file(model_dir: Path, entry: LoraEntry) -> Path | None:
    """The entry's file on the share, when its repo's manifest is complete and lists it."""
    path = repo_path(model_dir, entry.repo)
    manifest = complete_manifest(path, model_id=entry.repo, revision="main", variant=None)
    if manifest is None or entry.file not in {f.path for f in manifest.files}:
        return None
    return path / entry.file


def missing(model_dir: Path, entries: Iterable[LoraEntry]) -> list[LoraEntry]:
    """The entries not yet on the share."""
    return [e for e in entries if placed_file(model_dir, e) is None]


def lora_file_metadata(file: Path) -> dict[str, Any]:
    """The file's safetensors metadata (kohya's `ss_*` training notes), values as written; a
    value that is JSON (A1111 shows `ss_tag_frequency` so) is read as JSON."""
    from imagegen.model.weights import read_metadata

    try:
        with open(file, "rb", buffering=0) as f:
            raw = read_metadata(f, file)
    except (OSError, ValueError):
        return {}
    metadata: dict[str, Any] = {}
    for key, value in raw.items():
        try:
            metadata[key] = json.loads(value) if value[:1] in "{[" else value
        except ValueError:
            metadata[key] = value
    return metadata


# --- which model a LoRA fits -----------------------------------------------------------------


def lora_layer_sizes(file: Path, unet_config: dict) -> dict[str, tuple[int | None, int | None]]:
    """{component.module.path: (in features, out features)} of the LoRA's layers, its names
    read as diffusers reads them (kohya's, peft's and diffusers' layouts)."""
    from diffusers import StableDiffusionXLPipeline
    from diffusers.utils.state_dict_utils import (
        convert_state_dict_to_peft,
        convert_unet_state_dict_to_peft,
    )
    from safetensors.torch import load_file

    state, _ = StableDiffusionXLPipeline.lora_state_dict(load_file(file), unet_config=unet_config)
    sizes: dict[str, tuple[int | None, int | None]] = {}
    # The conversions diffusers' own loading applies, the UNet's and the text encoders'.
    unet = convert_unet_state_dict_to_peft(
        {k: v for k, v in state.items() if k.startswith("unet.")}
    )
    text = {k: v for k, v in state.items() if not k.startswith("unet.")}
    if text and not any(".lora_A." in k or ".lora_B." in k for k in text):  # not peft's yet
        text = convert_state_dict_to_peft(text)
    for key, tensor in (unet | text).items():
        layer, _, matrix = key.rpartition(".lora_")
        seen_in, seen_out = sizes.get(layer, (None, None))
        if matrix == "A.weight":
            sizes[layer] = (int(tensor.shape[1]), seen_out)
        elif matrix == "B.weight":
            sizes[layer] = (seen_in, int(tensor.shape[0]))
    return sizes


def model_layer_sizes(model_path: Path) -> dict[str, tuple[int, int]]:
    """{component.module.path: (in, out)} of the model's UNet and text encoders, each built
    from its config on the meta device (no memory, also for SDXL)."""
    import torch
    import transformers
    from accelerate import init_empty_weights
    from diffusers import UNet2DConditionModel

    modules: dict[str, Any] = {}
    with init_empty_weights():
        config = json.loads((model_path / "unet" / "config.json").read_text())
        modules["unet"] = UNet2DConditionModel.from_config(config)
        for name in ("text_encoder", "text_encoder_2"):
            if (model_path / name / "config.json").exists():
                encoder_config = transformers.AutoConfig.from_pretrained(model_path / name)
                encoder_class = getattr(transformers, encoder_config.architectures[0])
                modules[name] = encoder_class(encoder_config)
    sizes = {}
    for component, module in modules.items():
        for path, layer in module.named_modules():
            if isinstance(layer, torch.nn.Linear | torch.nn.Conv2d):
                shape = layer.weight.shape
                sizes[f"{component}.{path}"] = (int(shape[1]), int(shape[0]))
    return sizes


def fits(lora: dict[str, tuple[int | None, int | None]], model: dict[str, tuple[int, int]]) -> bool:
    """Whether every layer of the LoRA is a layer of the model, of the same sizes."""
    if not lora:
        return False
    for layer, (size_in, size_out) in lora.items():
        found = model.get(layer)
        if found is None or size_in not in (None, found[0]) or size_out not in (None, found[1]):
            return False
    return True


# --- the offered LoRAs -----------------------------------------------------------------------


@dataclass(frozen=True)
class OfferedLora:
    """A LoRA requests may name: a LORAS entry (`entry`) or a file dropped on the share."""

    name: str
    path: Path  # where it lies, or will lie once pulled
    entry: LoraEntry | None = None

    @property
    def on_share(self) -> bool:
        return self.path.is_file()


@dataclass
class LoraCatalog:
    """The offered LoRAs: LORAS's entries, then the dropped files found at the last refresh.

    `models` maps each offered model's id to its folder on the share, for the fit rule. Each
    LoRA's fit is computed once per file (its size and time) and model."""

    model_dir: Path
    entries: tuple[LoraEntry, ...] = ()
    models: dict[str, Path] = field(default_factory=dict)
    _dropped: dict[str, Path] | None = None
    _fits: dict[tuple, bool] = field(default_factory=dict)
    _model_sizes: dict[str, dict] = field(default_factory=dict)
    _hashes: dict[tuple, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def folder(self) -> Path:
        return Path(self.model_dir) / LORAS_FOLDER

    def refresh(self) -> None:
        """Looks again for dropped `*.safetensors` files (POST /sdapi/v1/refresh-loras)."""
        found: dict[str, Path] = {}
        if self.folder.is_dir():
            for file in sorted(self.folder.glob("*.safetensors")):
                if file.is_file() and _NAME.fullmatch(file.stem):
                    found.setdefault(file.stem, file)
        with self._lock:
            self._dropped = found

    def offered(self) -> list[OfferedLora]:
        if self._dropped is None:
            self.refresh()
        assert self._dropped is not None
        listed = [
            OfferedLora(e.name, repo_path(self.model_dir, e.repo) / e.file, e) for e in self.entries
        ]
        taken = {lora.name.lower() for lora in listed}
        listed += [
            OfferedLora(name, path)
            for name, path in self._dropped.items()
            if name.lower() not in taken
        ]
        return listed

    def find(self, name: str) -> OfferedLora | None:
        """The offered LoRA of this name (any case), or None."""
        wanted = name.lower()
        return next((lora for lora in self.offered() if lora.name.lower() == wanted), None)

    def on_share(self, lora: OfferedLora) -> bool:
        if lora.entry is None:
            return lora.path.is_file()
        return placed_file(self.model_dir, lora.entry) is not None

    def short_hash(self, lora: OfferedLora) -> str:
        """The first 12 characters of the file's sha256, as A1111's `Lora hashes` writes it;
        hashed once per file (its size and time)."""
        stat = lora.path.stat()
        key = ("sha256", str(lora.path), stat.st_size, stat.st_mtime_ns)
        with self._lock:
            known = self._hashes.get(key)
        if known is None:
            known = sha256_of(lora.path)[:12]
            with self._lock:
                self._hashes[key] = known
        return known

    def fitting_models(self, lora: OfferedLora) -> list[str]:
        """The offered models (on the share) whose layers the LoRA's are."""
        if not self.on_share(lora):
            return []
        stat = lora.path.stat()
        found = []
        for model_id, path in self.models.items():
            key = (str(lora.path), stat.st_size, stat.st_mtime_ns, model_id)
            with self._lock:
                known = self._fits.get(key)
            if known is None:
                known = self._fit(lora.path, model_id, path)
                if known is None:  # the model is not on the share yet: asked again once it is
                    continue
                with self._lock:
                    self._fits[key] = known
            if known:
                found.append(model_id)
        return found

    def _fit(self, file: Path, model_id: str, path: Path) -> bool | None:
        """Whether the file fits the model; None while the model is not on the share."""
        try:
            config = json.loads((path / "unet" / "config.json").read_text())
        except (OSError, ValueError):
            return None
        with self._lock:
            sizes = self._model_sizes.get(model_id)
        if sizes is None:
            sizes = model_layer_sizes(path)
            with self._lock:
                self._model_sizes[model_id] = sizes
        try:
            return fits(lora_layer_sizes(file, config), sizes)
        except Exception:  # a file diffusers cannot read as a LoRA fits no model
            return False
