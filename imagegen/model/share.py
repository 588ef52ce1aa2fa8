"""The model's directory on the mounted share, and when it counts as complete.

The share is SMB, with no POSIX locks, so nothing here locks. Files arrive under temporary
names and are renamed into place. The manifest is written last. A copy is complete only when
the manifest is there and every file has its size. So a crash leaves no manifest, and the next
pull repairs it."""

import hashlib
import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from core.timestamps import iso_ms, utc_now
from imagegen.atomic_files import copy_atomically, is_partial, write_atomically

MANIFEST_NAME = ".manifest.json"


@dataclass(frozen=True)
class ModelFile:
    path: str  # relative, posix
    size: int
    sha256: str | None = None  # the hub's LFS hash, for large files
    blob_id: str | None = None  # the git blob id, for the others


@dataclass(frozen=True)
class AdapterRecord:
    """A LoRA adapter on the share: its origin, and `path` among the manifest's files.

    Paths are relative to the model's directory."""

    repo: str
    file: str
    commit: str
    path: str


@dataclass(frozen=True)
class DecoderRecord:
    """The tiny decoder on the share: repo, commit, and folder in the model's directory."""

    repo: str
    commit: str
    folder: str


@dataclass(frozen=True)
class InpaintRecord:
    """The inpainting checkpoint's UNet on the share: repo, revision, commit and folder."""

    repo: str
    requested_revision: str
    commit: str
    folder: str


@dataclass(frozen=True)
class Manifest:
    model_id: str
    requested_revision: str
    commit: str
    variant: str | None
    files: tuple[ModelFile, ...]  # the model's, the adapters', the decoder's, the inpainting's
    completed_at: str
    adapters: tuple[AdapterRecord, ...] = ()
    decoder: DecoderRecord | None = None
    inpaint: InpaintRecord | None = None

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def load_variant(self) -> str | None:
        """The variant to ask diffusers for: only if some weights on the share have it."""
        marker = f".{self.variant}."
        has_variant = any(marker in f.path or f".{self.variant}-" in f.path for f in self.files)
        return self.variant if self.variant and has_variant else None


def model_path(model_dir: Path, model_id: str) -> Path:
    return Path(model_dir) / model_id.replace("/", "--")


def read_manifest(path: Path) -> Manifest | None:
    try:
        raw = json.loads((path / MANIFEST_NAME).read_text())
        files = tuple(ModelFile(**f) for f in raw.pop("files"))
        adapters = tuple(AdapterRecord(**a) for a in raw.pop("adapters", []))
        decoder = raw.pop("decoder", None)
        decoder = DecoderRecord(**decoder) if decoder is not None else None
        inpaint = raw.pop("inpaint", None)
        inpaint = InpaintRecord(**inpaint) if inpaint is not None else None
        return Manifest(files=files, adapters=adapters, decoder=decoder, inpaint=inpaint, **raw)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def complete_manifest(
    path: Path, *, model_id: str, revision: str, variant: str | None
) -> Manifest | None:
    """The manifest, if the directory holds a complete download of what is configured."""
    manifest = read_manifest(path)
    if manifest is None:
        return None
    if manifest.model_id != model_id or manifest.variant != variant:
        return None
    if revision not in (manifest.requested_revision, manifest.commit):
        return None
    for f in manifest.files:
        try:
            if (path / f.path).stat().st_size != f.size:
                return None
        except OSError:
            return None
    return manifest


def git_blob_id(path: Path) -> str:
    """The file's git id: sha1 over a `blob <size>` header and the bytes."""
    header = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with path.open("rb") as f:
        return hashlib.file_digest(f, lambda: header).hexdigest()


def sha256_of(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def broken_files(path: Path, manifest: Manifest) -> list[str]:
    """Manifest files that are missing, of the wrong size, or hashing wrong.

    The hub lists sha256 for large files, the git blob id for others."""
    broken = []
    for f in manifest.files:
        file = path / f.path
        try:
            if file.stat().st_size != f.size:
                broken.append(f"{f.path}: size {file.stat().st_size}, expected {f.size}")
            elif f.sha256 and sha256_of(file) != f.sha256:
                broken.append(f"{f.path}: sha256 differs from the hub's")
            elif not f.sha256 and f.blob_id and git_blob_id(file) != f.blob_id:
                broken.append(f"{f.path}: content differs from the hub's")
        except FileNotFoundError:
            broken.append(f"{f.path}: missing")
    return broken


def already_placed(path: Path, previous: Manifest | None, wanted: ModelFile) -> bool:
    """Whether `wanted` is already on the share with the manifest's path, size and hash.

    A new pull keeps such a file, so changing the extras refetches nothing else."""
    if previous is None or not (wanted.sha256 or wanted.blob_id):
        return False
    if wanted not in previous.files:  # path, size and both hashes equal
        return False
    try:
        return (path / wanted.path).stat().st_size == wanted.size
    except OSError:
        return False


def forget_manifest(path: Path) -> None:
    """Marks the directory incomplete before its files change."""
    (path / MANIFEST_NAME).unlink(missing_ok=True)


def remove_model(path: Path) -> int:
    """Deletes a model's directory from the share; returns the bytes freed.

    The manifest goes first, so no process takes the copy for complete meanwhile."""
    forget_manifest(path)
    freed = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    shutil.rmtree(path)
    return freed


class PlacementError(OSError):
    """A copy on the share does not have the size the hub lists for its file."""


def place_file(source: Path, path: Path, relative: str, *, size: int) -> None:
    """Copies a downloaded file onto the share, named only when whole and of `size`.

    Size, not hash, as huggingface_hub checks; `pull_model --check` hashes on demand."""

    def has_listed_size(copy: Path) -> None:
        copied = copy.stat().st_size
        if copied != size:
            raise PlacementError(f"{relative}: {copied} bytes copied, the hub lists {size}")

    copy_atomically(source, path / relative, verify=has_listed_size)


def write_manifest(
    path: Path,
    *,
    model_id: str,
    requested_revision: str,
    commit: str,
    variant: str | None,
    files: list[ModelFile],
    adapters: tuple[AdapterRecord, ...] = (),
    decoder: DecoderRecord | None = None,
    inpaint: InpaintRecord | None = None,
) -> Manifest:
    manifest = Manifest(
        model_id=model_id,
        requested_revision=requested_revision,
        commit=commit,
        variant=variant,
        files=tuple(sorted(files, key=lambda f: f.path)),
        completed_at=iso_ms(utc_now()),
        adapters=adapters,
        decoder=decoder,
        inpaint=inpaint,
    )
    write_atomically(path / MANIFEST_NAME, json.dumps(asdict(manifest), indent=2).encode())
    return manifest


def remove_leftovers(path: Path, keep: set[str], *, partial_age: float = 3600.0) -> None:
    """Removes files no longer in the model, and stale temporary files.

    A temporary file waits until no other process can still be writing it."""
    now = time.time()
    for file in path.rglob("*"):
        relative = file.relative_to(path).as_posix()
        if not file.is_file() or relative == MANIFEST_NAME or relative in keep:
            continue
        if is_partial(file) and now - file.stat().st_mtime < partial_age:
            continue
        file.unlink(missing_ok=True)
