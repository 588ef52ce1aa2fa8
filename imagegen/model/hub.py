"""What to fetch from the model hub, and how it reaches the share.

Only the files the pipeline needs are fetched: model_index.json names the components, and
each component contributes its configs, tokenizer and scheduler files and the configured
variant's `.safetensors` (never `.bin`, `.ckpt`, ONNX or Flax copies, nor single-file
checkpoints at the repo root). huggingface_hub downloads into its own cache on local disk,
where its lock files are harmless (it locks beside its files, which SMB cannot do); each file
is then copied onto the share under a temporary name and renamed, and the manifest is
written last (see imagegen.model.share).
"""

import contextlib
import json
import logging
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.hf_api import RepoFile

from imagegen.model import share
from imagegen.model.components import pipeline_components
from imagegen.model.share import Manifest, ModelFile

log = logging.getLogger(__name__)

MODEL_INDEX = "model_index.json"
SIDE_FILE_SUFFIXES = (".json", ".txt", ".model")
WEIGHTS_SUFFIX = ".safetensors"
OTHER_WEIGHTS = (".bin", ".ckpt", ".pt", ".pth", ".msgpack", ".onnx")
_SHARD = re.compile(r"-\d{5}-of-\d{5}$")
_INDEX = re.compile(r"\.safetensors\.index(?:\.(?P<variant>[^.]+))?\.json$")


@dataclass(frozen=True)
class ModelSource:
    """Where the model comes from and where it goes."""

    model_id: str
    revision: str
    variant: str | None
    model_dir: Path
    cache_dir: Path
    endpoint: str | None = None
    token: str | None = None
    workers: int = 8

    @property
    def path(self) -> Path:
        return share.model_path(self.model_dir, self.model_id)

    def complete_manifest(self) -> Manifest | None:
        return share.complete_manifest(
            self.path, model_id=self.model_id, revision=self.revision, variant=self.variant
        )


class DownloadProgress:
    """Bytes fetched so far, derived from what is finished plus what huggingface_hub is
    still writing (`*.incomplete` in its cache), so it moves during a large file too."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._blobs_dir: Path | None = None
        self.bytes_total = 0
        self._finished = 0
        self._reported = 0

    def start(self, total: int, blobs_dir: Path) -> None:
        with self._lock:
            self.bytes_total, self._blobs_dir = total, blobs_dir

    def file_done(self, size: int) -> None:
        with self._lock:
            self._finished += size

    @property
    def bytes_done(self) -> int:
        in_flight = 0
        if self._blobs_dir is not None:
            for partial in self._blobs_dir.glob("*.incomplete"):
                with contextlib.suppress(OSError):  # renamed into a blob since the listing
                    in_flight += partial.stat().st_size
        with self._lock:
            done = min(self._finished + in_flight, self.bytes_total)
            self._reported = max(self._reported, done)  # never moves backwards
            return self._reported


def weight_variant(filename: str) -> str | None:
    """`a.fp16.safetensors`, `a.fp16-00001-of-00002.safetensors` -> fp16; `a.safetensors` -> None"""
    stem = _SHARD.sub("", filename[: -len(WEIGHTS_SUFFIX)])
    return stem.rsplit(".", 1)[1] if "." in stem else None


def select_files(
    repo_files: list[ModelFile], components: list[str], variant: str | None
) -> list[ModelFile]:
    """The files a pipeline with these components needs, for this variant (a component
    without that variant's weights falls back to its default weights, as diffusers does)."""
    by_folder: dict[str, list[ModelFile]] = {}
    for f in repo_files:
        parts = PurePosixPath(f.path).parts
        if len(parts) == 2:
            by_folder.setdefault(parts[0], []).append(f)

    chosen = [f for f in repo_files if f.path == MODEL_INDEX]
    for component in components:
        files = by_folder.get(component, [])
        variants = {
            weight_variant(PurePosixPath(f.path).name)
            for f in files
            if f.path.endswith(WEIGHTS_SUFFIX)
        }
        wanted = variant if variant in variants else None
        if not variants and any(f.path.endswith(OTHER_WEIGHTS) for f in files):
            raise ValueError(f"component {component!r} has no safetensors weights")
        if variants and wanted not in variants:
            raise ValueError(
                f"component {component!r} has neither {variant} nor default safetensors"
            )
        for f in files:
            name = PurePosixPath(f.path).name
            index = _INDEX.search(name)
            if index:
                keep = index.group("variant") == wanted
            elif name.endswith(WEIGHTS_SUFFIX):
                keep = weight_variant(name) == wanted
            else:
                keep = name.endswith(SIDE_FILE_SUFFIXES)
            if keep:
                chosen.append(f)
    return sorted(chosen, key=lambda f: f.path)


def _model_file(entry: RepoFile) -> ModelFile:
    sha256 = entry.lfs.sha256 if entry.lfs else None
    return ModelFile(path=entry.path, size=entry.size, sha256=sha256, blob_id=entry.blob_id)


def download_to_share(source: ModelSource, progress: DownloadProgress) -> Manifest:
    api = HfApi(endpoint=source.endpoint, token=source.token)
    commit = api.model_info(source.model_id, revision=source.revision).sha
    entries = api.list_repo_tree(source.model_id, revision=commit, recursive=True)
    repo_files = [_model_file(e) for e in entries if isinstance(e, RepoFile)]

    def fetch(filename: str) -> Path:
        return Path(
            hf_hub_download(
                source.model_id,
                filename,
                revision=commit,
                cache_dir=source.cache_dir,
                endpoint=source.endpoint,
                token=source.token,
            )
        )

    components = list(pipeline_components(json.loads(fetch(MODEL_INDEX).read_text())))
    files = select_files(repo_files, components, source.variant)
    repo_cache = source.cache_dir / f"models--{source.model_id.replace('/', '--')}"
    progress.start(sum(f.size for f in files), repo_cache / "blobs")
    log.info("downloading %s@%s: %d files", source.model_id, commit[:12], len(files))

    path = source.path
    path.mkdir(parents=True, exist_ok=True)
    share.forget_manifest(path)

    def fetch_and_place(f: ModelFile) -> None:
        share.place_file(fetch(f.path), path, f.path, size=f.size)
        progress.file_done(f.size)

    pool = ThreadPoolExecutor(max_workers=source.workers, thread_name_prefix="download")
    try:
        for future in [pool.submit(fetch_and_place, f) for f in files]:
            future.result()
    finally:
        # On a failure, files not started yet are not fetched in vain.
        pool.shutdown(wait=True, cancel_futures=True)

    manifest = share.write_manifest(
        path,
        model_id=source.model_id,
        requested_revision=source.revision,
        commit=commit,
        variant=source.variant,
        files=files,
    )
    share.remove_leftovers(path, keep={f.path for f in files})
    return manifest
