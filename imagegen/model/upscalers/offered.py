"""The upscalers this service offers by name: Pillow's `Lanczos` and `Nearest`, which need no
weights, and each UPSCALERS entry, an ESRGAN-family file on the hub (`repo:file[=name]`, the
name defaulting to the file's stem).

An entry's file is pulled onto the share as a model's files are: fetched into the local
download cache (which locks), copied onto the share under its final name only when whole (the
share is never locked), its local copy removed, then a small manifest written beside it last.
A pull finds the manifest and a file of its size and skips the entry: a warm pull fetches
nothing. The file lies at `MODEL_DIR/upscalers/<org>--<name>/<file>`."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from huggingface_hub import hf_hub_download, hf_hub_url

from core.errors import FieldError
from imagegen.model import share
from imagegen.model.adapters import REPO_RULE, is_repo_id, share_folder_name
from imagegen.model.hub import remove_local_copy

if TYPE_CHECKING:  # the networks import torch: a web process that never upscales must not
    from imagegen.model.upscalers.upscaler import ModelUpscaler, Upscaler

log = logging.getLogger(__name__)

FOLDER = "upscalers"
FORM = "repo:file[=name], comma-separated (e.g. org/name:x4.pth=Sharp-4x)"
# Pillow's filters (imagegen.model.upscalers.upscaler's LANCZOS and NEAREST), by name: naming
# them here keeps torch out of a process that only lists or checks names.
FILTER_NAMES = ("Lanczos", "Nearest")
SUFFIXES = (".safetensors", ".pth")  # what esrgan_files reads
MANIFEST_SUFFIX = ".manifest.json"


@dataclass(frozen=True)
class UpscalerEntry:
    """One UPSCALERS entry as written."""

    repo: str
    file: str  # a .safetensors or .pth file in the repo
    name: str  # what a request calls it by

    @property
    def share_path(self) -> str:
        """Where the file lies, relative to MODEL_DIR."""
        return f"{FOLDER}/{share_folder_name(self.repo)}/{self.file}"


def parse_upscalers(raw: str) -> tuple[UpscalerEntry, ...]:
    """UPSCALERS' entries, in order. Raises ValueError naming the first malformed entry (not
    repo:file, a repo that is not a hub id, a file that is not .safetensors or .pth or not a
    path inside the repo, an empty name, a name given twice or one of the filters')."""
    entries: list[UpscalerEntry] = []
    taken = {name.lower() for name in FILTER_NAMES}
    for written in raw.split(","):
        text = written.strip()
        if not text:
            continue
        spec, eq, name = text.partition("=")
        repo, colon, file = spec.strip().partition(":")
        repo, file, name = repo.strip(), file.strip(), name.strip()
        if not colon or not file:
            raise ValueError(f"UPSCALERS: {text!r} is not {FORM}")
        if not is_repo_id(repo):
            raise ValueError(f"UPSCALERS: {repo!r} in {text!r} is not a hub repo id ({REPO_RULE})")
        if not file.endswith(SUFFIXES):
            raise ValueError(f"UPSCALERS: {text!r} must name a {' or '.join(SUFFIXES)} file")
        if file.startswith("/") or "\\" in file or {"", ".", ".."} & set(file.split("/")):
            raise ValueError(
                f"UPSCALERS: the file in {text!r} must be a path inside the repo "
                "(no leading '/', no '.' or '..' or empty parts, no '\\')"
            )
        if eq and not name:
            raise ValueError(f"UPSCALERS: {text!r} has an empty name after '='")
        name = name or PurePosixPath(file).stem
        if name.lower() in taken:
            raise ValueError(f"UPSCALERS: the name {name!r} is offered twice (one name each)")
        taken.add(name.lower())
        entries.append(UpscalerEntry(repo=repo, file=file, name=name))
    return tuple(entries)


class UnknownUpscaler(FieldError):
    """A request naming an upscaler this service does not offer: 400 naming the field."""

    def __init__(self, field_name: str, asked: str, offered: Iterable[str]) -> None:
        super().__init__(field_name, f"{asked!r} is not offered; offered: {', '.join(offered)}")


class UpscalerNotPulled(Exception):
    """An offered upscaler whose file is not on the share yet (a pull fetches it)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"upscaler {name!r} is not on the share yet: POST /model/pull fetches it")
        self.name = name


@dataclass
class OfferedUpscalers:
    """The offered upscalers of one process, their files on the share and their pull."""

    entries: tuple[UpscalerEntry, ...]
    model_dir: Path
    cache_dir: Path
    endpoint: str | None = None
    token: str | None = None
    _loaded: dict[str, ModelUpscaler] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _pull_lock: threading.Lock = field(default_factory=threading.Lock)
    _pulling: threading.Thread | None = None

    @property
    def names(self) -> list[str]:
        return [*FILTER_NAMES, *(e.name for e in self.entries)]

    def path_of(self, entry: UpscalerEntry) -> Path:
        return self.model_dir / entry.share_path

    def on_share(self, entry: UpscalerEntry) -> bool:
        """Whether the entry's manifest is there and its file has the size it records."""
        path = self.path_of(entry)
        try:
            recorded = json.loads(_manifest_path(path).read_text())
            return bool(path.stat().st_size == recorded["size"])
        except (OSError, ValueError, KeyError, TypeError):
            return False

    def missing(self) -> list[UpscalerEntry]:
        return [e for e in self.entries if not self.on_share(e)]

    def url_of(self, entry: UpscalerEntry) -> str:
        return hf_hub_url(entry.repo, entry.file, endpoint=self.endpoint)

    def pull(self) -> list[UpscalerEntry]:
        """Fetches every entry not on the share yet, in order; returns those fetched. One pull
        at a time: the model's pull job and POST /model/pull's background one may meet."""
        fetched = []
        with self._pull_lock:
            for entry in self.missing():
                self._fetch(entry)
                fetched.append(entry)
        return fetched

    def start_pull(self) -> bool:
        """Pulls the missing entries in a background thread unless one runs; False when none
        is missing. A failure is logged; the next pull tries again."""
        if not self.missing():
            return False
        with self._lock:
            if self._pulling is None or not self._pulling.is_alive():
                self._pulling = threading.Thread(
                    target=self._pull_logged, name="upscaler-pull", daemon=True
                )
                self._pulling.start()
        return True

    def wait(self, timeout: float | None = None) -> None:
        """Waits for a background pull, if one runs (for callers that need the files)."""
        pulling = self._pulling
        if pulling is not None:
            pulling.join(timeout)

    def find(self, name: str, *, field_name: str = "upscaler") -> Upscaler:
        """The upscaler `name` names (any case). Raises UnknownUpscaler, or UpscalerNotPulled
        for an offered file not on the share."""
        wanted = name.strip().lower()
        from imagegen.model.upscalers.upscaler import LANCZOS, NEAREST

        for upscaler in (LANCZOS, NEAREST):
            if upscaler.name.lower() == wanted:
                return upscaler
        for entry in self.entries:
            if entry.name.lower() == wanted:
                return self._load(entry)
        raise UnknownUpscaler(field_name, name, self.names)

    def listing(self) -> list[dict]:
        """A1111's /upscalers items: the filters first (no weights, no scale of their own),
        then each entry, its scale read from its weights once they are on the share."""
        items: list[dict] = [
            {"name": name, "model_name": None, "model_path": None, "model_url": None,
             "scale": None}
            for name in FILTER_NAMES
        ]  # fmt: skip
        for entry in self.entries:
            scale = self._load(entry).scale if self.on_share(entry) else None
            items.append(
                {
                    "name": entry.name,
                    "model_name": "ESRGAN",
                    "model_path": entry.share_path,
                    "model_url": self.url_of(entry),
                    "scale": scale,
                }
            )
        return items

    def _load(self, entry: UpscalerEntry) -> ModelUpscaler:
        with self._lock:
            if entry.name in self._loaded:
                return self._loaded[entry.name]
        if not self.on_share(entry):
            raise UpscalerNotPulled(entry.name)
        from imagegen.model.upscalers.upscaler import load_model_upscaler

        upscaler = load_model_upscaler(self.path_of(entry), name=entry.name)
        with self._lock:
            return self._loaded.setdefault(entry.name, upscaler)

    def _pull_logged(self) -> None:
        try:
            self.pull()
        except Exception:
            log.exception("upscaler pull failed")

    def _fetch(self, entry: UpscalerEntry) -> None:
        """hf_hub_download checks the file against the hub's size and hash in the cache;
        the copy onto the share is checked against that size."""
        log.info("downloading upscaler %s (%s:%s)", entry.name, entry.repo, entry.file)
        local = Path(
            hf_hub_download(
                entry.repo, entry.file, cache_dir=self.cache_dir, endpoint=self.endpoint,
                token=self.token,
            )
        )  # fmt: skip
        size = local.stat().st_size
        path = self.path_of(entry)
        _manifest_path(path).unlink(missing_ok=True)
        try:
            share.place_file(local, self.model_dir, entry.share_path, size=size)
        finally:
            remove_local_copy(local, self.cache_dir)
        record = {"repo": entry.repo, "file": entry.file, "size": size}
        manifest = _manifest_path(path)
        partial = manifest.with_name(manifest.name + ".partial")
        partial.write_text(json.dumps(record))
        partial.replace(manifest)


def _manifest_path(path: Path) -> Path:
    return path.with_name(f".{path.name}{MANIFEST_SUFFIX}")
