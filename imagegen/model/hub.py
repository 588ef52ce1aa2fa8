"""What to fetch from the model hub, and how it reaches the share.

The libraries decide the files: diffusers' own download rules for a pipeline loaded with
the configured `variant` and `use_safetensors=True` (the allow and ignore patterns that
`DiffusionPipeline.download` builds from model_index.json and the repo's file list, with
diffusers' helpers), applied with huggingface_hub's `filter_repo_objects` as
`snapshot_download` applies them. Two rules of this service narrow that set: only
model_index.json and the folders of the pipeline's components (what `from_pretrained`
reads; never a single-file checkpoint at the repo root), and never a pickle, ONNX, Flax or
OpenVINO file (NEVER).

huggingface_hub downloads into its own cache on local disk, where its lock files are
harmless (it locks beside its files, which SMB cannot do); each file is then copied onto the
share under a temporary name and renamed, and the manifest is written last (see
imagegen.model.share).
"""

import contextlib
import json
import logging
import posixpath
import re
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.hf_api import RepoFile
from huggingface_hub.utils import filter_repo_objects

from imagegen.model import share
from imagegen.model.components import pipeline_components
from imagegen.model.share import Manifest, ModelFile

log = logging.getLogger(__name__)

MODEL_INDEX = "model_index.json"
# Formats the service never fetches, even where diffusers' rules would let one through (a
# folder without safetensors weights is fetched whole: `scheduler/*`).
NEVER = ["*.bin", "*.ckpt", "*.pt", "*.pth", "*.msgpack", "*.onnx", "*.onnx_data", "*.pb",
         "*openvino_model.*"]  # fmt: skip
WEIGHTS_SUFFIX = ".safetensors"
_SHARD = re.compile(r"-\d{5}-of-\d{5}$")


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


# --- which files --------------------------------------------------------------------------


def download_patterns(
    filenames: set[str], components: Iterable[str], variant: str | None
) -> tuple[list[str], list[str]]:
    """(allow, ignore): the glob patterns `DiffusionPipeline.download` (diffusers 0.42) hands
    to `snapshot_download` for this listing, with use_safetensors=True, no ONNX and no custom
    code, built by the same diffusers helpers. Raises OSError when a component has no
    safetensors weights, and ValueError when no file of the repo has `variant`.

    Imported here, not at the top: importing diffusers takes seconds, and this module is
    imported when the service starts."""
    from diffusers.pipelines.pipeline_loading_utils import (
        _get_ignore_patterns,
        filter_model_files,
        variant_compatible_siblings,
    )

    components = set(components)
    model_folders = {
        folder
        for folder in map(posixpath.dirname, filter_model_files(filenames))
        if folder in components
    }
    ignore = _get_ignore_patterns(
        passed_components=[],
        model_folder_names=model_folders,
        model_filenames=filenames,
        use_safetensors=True,
        allow_pickle=False,
        use_onnx=False,
        is_onnx=False,
        use_flashpack=False,
        variant=variant,
    )
    model_files, _ = variant_compatible_siblings(filenames, variant=variant, ignore_patterns=ignore)
    allow = [
        *model_files,
        *(f"{c}/*" for c in sorted(components - model_folders)),  # tokenizers, schedulers
        *(f"{c}/config.json" for c in sorted(model_folders)),
        MODEL_INDEX,
    ]
    ignore += [f"{pattern}.index.*json" for pattern in ignore]  # their shard indexes too
    return allow, ignore


def wanted_files(
    repo_files: list[ModelFile], model_index: dict, variant: str | None
) -> list[ModelFile]:
    """The files `from_pretrained(variant=..., use_safetensors=True)` reads from a copy of the
    repo: diffusers' download rules (`download_patterns`), only model_index.json and the
    components' folders, never NEVER. A component without `variant` weights gets its
    default ones, as in diffusers; a repo with no `variant` file at all gets its default
    files (where diffusers raises), so MODEL_VARIANT=fp16 works for any repo."""
    components = set(pipeline_components(model_index))
    names = {f.path for f in repo_files} - set(model_index.get("_ignore_files", []))
    try:
        allow, ignore = download_patterns(names, components, variant)
    except ValueError:
        if variant is None:
            raise
        log.info("no %s weights in the repo: fetching its default weights", variant)
        allow, ignore = download_patterns(names, components, None)
    chosen = set(filter_repo_objects(names, allow_patterns=allow, ignore_patterns=ignore + NEVER))
    return sorted(
        (f for f in repo_files if f.path in chosen and _in_pipeline(f.path, components)),
        key=lambda f: f.path,
    )


def _in_pipeline(path: str, components: set[str]) -> bool:
    """model_index.json, or a file in a component's folder: diffusers' rules would also fetch
    variant weights of folders model_index does not name (SDXL base's `vae_1_0`) and
    transformers-style files at the repo root, which the pipeline never reads."""
    return path == MODEL_INDEX or path.split("/", 1)[0] in components


def weight_variant(filename: str) -> str | None:
    """`a.fp16.safetensors`, `a.fp16-00001-of-00002.safetensors` -> fp16; `a.safetensors` -> None.
    Not used to choose what to fetch: the streaming loader (imagegen.model.weights) names the
    files of a component on the share with it."""
    stem = _SHARD.sub("", filename[: -len(WEIGHTS_SUFFIX)])
    return stem.rsplit(".", 1)[1] if "." in stem else None


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

    model_index = json.loads(fetch(MODEL_INDEX).read_text())
    files = wanted_files(repo_files, model_index, source.variant)
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
