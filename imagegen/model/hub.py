"""What to fetch from the model hub, and how it reaches the share.

Diffusers' download rules pick the files. We keep only model_index.json and the components'
folders, and never NEVER's formats. Each file lands first in huggingface_hub's local cache: it
locks there, and SMB cannot lock. It is then placed on the share (imagegen.model.share), and
the local copy removed. So local disk holds only files in flight. The manifest is written
last. Unchanged files stay, so changing the adapters fetches only the adapters."""

import dataclasses
import json
import logging
import os
import posixpath
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import RemoteEntryNotFoundError
from huggingface_hub.hf_api import RepoFile
from huggingface_hub.utils import filter_repo_objects
from huggingface_hub.utils import tqdm as hf_tqdm

from imagegen.model import extras, share
from imagegen.model import inpaint as inpainting
from imagegen.model.adapters import Adapter
from imagegen.model.components import pipeline_components
from imagegen.model.decoder import FULL_DECODER, DecoderChoice
from imagegen.model.loras import LoraEntry, missing
from imagegen.model.share import InpaintRecord, Manifest, ModelFile

log = logging.getLogger(__name__)

MODEL_INDEX = "model_index.json"
# Formats we never fetch, even where diffusers would. A folder without safetensors weights is
# fetched whole: `scheduler/*`.
NEVER = ["*.bin", "*.ckpt", "*.pt", "*.pth", "*.msgpack", "*.onnx", "*.onnx_data", "*.pb",
         "*openvino_model.*"]  # fmt: skip


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
    adapters: tuple[Adapter, ...] = ()  # MODEL_ADAPTERS
    decoder: DecoderChoice = FULL_DECODER  # VAE_DECODER, VAE_DECODER_REPO
    inpaint: inpainting.InpaintChoice | None = None  # INPAINT_MODEL_ID, INPAINT_MODEL_REVISION
    loras: tuple[LoraEntry, ...] = ()  # LORAS: pulled with the model, each in MODEL_DIR/loras

    @property
    def path(self) -> Path:
        return share.model_path(self.model_dir, self.model_id)

    def complete_manifest(self) -> Manifest | None:
        """The manifest, if the share holds a complete copy of the configured model and extras."""
        manifest = share.complete_manifest(
            self.path, model_id=self.model_id, revision=self.revision, variant=self.variant
        )
        if manifest is None:
            return None
        if not extras.matches(manifest, self.adapters, self.decoder, self.model_index):
            return None
        if not inpainting.matches(manifest.inpaint, self.inpaint):
            return None
        if missing(self.model_dir, self.loras):  # ready only once every LORAS file is there
            return None
        return manifest

    def model_index(self) -> dict | None:
        """model_index.json on the share, if readable."""
        try:
            return json.loads((self.path / MODEL_INDEX).read_text())
        except (OSError, ValueError):
            return None


# --- progress ------------------------------------------------------------------------------


class DownloadProgress:
    """Bytes of the pull so far, for /model/status and pull_model's bar.

    It counts each chunk written, so it moves during a large file. It never moves backwards."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.bytes_total = 0
        self._per_file: dict[str, int] = {}
        self._counted = 0
        self._reported = 0

    def start(self, total: int) -> None:
        with self._lock:
            self.bytes_total = total

    def hook(self, path: str) -> type[hf_tqdm]:
        """The `tqdm_class` for downloading `path`."""
        return type("FileBytes", (_FileBytes,), {"progress": self, "path": path})

    def add(self, path: str, n: int) -> None:
        with self._lock:
            self._per_file[path] = self._per_file.get(path, 0) + n
            self._counted += n

    def file_done(self, path: str, size: int) -> None:
        """`path` is on the share: it counts exactly its size, whatever the hook said."""
        with self._lock:
            self._counted += size - self._per_file.get(path, 0)
            self._per_file[path] = size

    @property
    def bytes_done(self) -> int:
        with self._lock:
            done = min(max(self._counted, 0), self.bytes_total)
            self._reported = max(self._reported, done)
            return self._reported


class _FileBytes(hf_tqdm):
    """A progress bar that counts into a DownloadProgress instead of drawing.

    Bytes written count, not bytes received, so Xet's `update_transfer` is ignored."""

    progress: DownloadProgress
    path: str
    monitor_interval = 0  # no tqdm monitor thread per file

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **{**kwargs, "disable": True})

    def update(self, n: float | None = 1) -> None:
        self.progress.add(self.path, int(n or 0))

    def update_transfer(self, n: float | None = 1) -> None:
        """Network bytes: ignored."""

    def set_transfer_postfix_str(self, *args, **kwargs) -> None:
        """No bar to label."""


# --- which files --------------------------------------------------------------------------


def download_patterns(
    filenames: set[str], components: Iterable[str], variant: str | None
) -> tuple[list[str], list[str]]:
    """(allow, ignore) globs as `DiffusionPipeline.download` (diffusers 0.42) builds them.

    Raises OSError for a component without safetensors, ValueError when no file has `variant`.
    Diffusers is imported here because it takes seconds."""
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
    # Diffusers annotates the ignores list[str] but passes sets itself (0.42).
    ignore = _get_ignore_patterns(
        passed_components=[],
        model_folder_names=model_folders,  # type: ignore[arg-type]
        model_filenames=filenames,  # type: ignore[arg-type]
        use_safetensors=True,
        allow_pickle=False,
        use_onnx=False,
        is_onnx=False,
        use_flashpack=False,
        variant=variant,
    )
    # Annotated `list[os.PathLike] | str`; returns (usable, variant) name sets.
    model_files, _ = cast(
        tuple[set[str], set[str]],
        variant_compatible_siblings(filenames, variant=variant, ignore_patterns=ignore),
    )
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
    """The files `from_pretrained(variant=..., use_safetensors=True)` reads.

    Without `variant` files, defaults are used where diffusers raises. So MODEL_VARIANT=fp16
    works for any repo."""
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
    """model_index.json, or a file in a component's folder.

    Diffusers would also fetch unused folders (SDXL's `vae_1_0`) and root files."""
    return path == MODEL_INDEX or path.split("/", 1)[0] in components


def inpaint_unet(
    api: HfApi, choice: inpainting.InpaintChoice, variant: str | None
) -> tuple[list[ModelFile], dict[str, extras.Origin], InpaintRecord]:
    """The inpainting checkpoint's `unet` files, picked as wanted_files picks them.

    Raises ExtraNotFound naming INPAINT_MODEL_ID when the repo or its UNet is missing."""
    commit = extras.commit_of_setting(api, choice.repo, choice.revision, "INPAINT_MODEL_ID")
    try:
        entries = api.list_repo_tree(
            choice.repo, path_in_repo=inpainting.UNET, revision=commit, recursive=True
        )
        repo_files = [_model_file(e) for e in entries if isinstance(e, RepoFile)]
    except RemoteEntryNotFoundError:
        repo_files = []
    index = {inpainting.UNET: ["diffusers", "UNet2DConditionModel"]}  # the folder, as a pipeline
    try:
        chosen = wanted_files(repo_files, index, variant)
    except OSError:  # diffusers' words: no safetensors weights in the folder
        chosen = []
    names = {f.path for f in chosen}
    if f"{inpainting.UNET}/config.json" not in names or not any(
        name.endswith(".safetensors") for name in names
    ):
        raise extras.ExtraNotFound(
            f"INPAINT_MODEL_ID: {choice.repo} has no `{inpainting.UNET}` folder with a "
            f"config.json and safetensors weights (at commit {commit[:12]})"
        )
    files, origins = [], {}
    for f in chosen:
        path = f"{choice.folder}/{f.path}"
        files.append(dataclasses.replace(f, path=path))
        origins[path] = extras.Origin(choice.repo, commit, f.path)
    record = InpaintRecord(choice.repo, choice.revision, commit, choice.folder)
    return files, origins, record


# --- the transfer -------------------------------------------------------------------------


def _model_file(entry: RepoFile) -> ModelFile:
    sha256 = entry.lfs.sha256 if entry.lfs else None
    return ModelFile(path=entry.path, size=entry.size, sha256=sha256, blob_id=entry.blob_id)


def same_blob_groups(files: list[ModelFile]) -> list[list[ModelFile]]:
    """Files grouped by hub hash: SDXL's two tokenizers ship identical files.

    Each blob is fetched once and placed at each path. So no worker removes a blob another
    still places."""
    groups: dict[str, list[ModelFile]] = {}
    for f in files:
        groups.setdefault(f.sha256 or f.blob_id or f.path, []).append(f)
    return list(groups.values())


def remove_local_copy(local: Path, cache_dir: Path) -> None:
    """Removes a file's blob and snapshot entry from huggingface_hub's cache.

    Nothing outside the cache is touched. The small `.locks` files stay."""
    blob = Path(os.path.realpath(local))
    if blob.is_relative_to(os.path.realpath(cache_dir)):
        blob.unlink(missing_ok=True)
    local.unlink(missing_ok=True)


def fetch_and_place(
    group: list[ModelFile],
    fetch: Callable[[str], Path],
    path: Path,
    cache_dir: Path,
    progress: DownloadProgress,
) -> None:
    """Fetches one blob, places it at each path, then removes the local copy, even on failure.

    If another process sharing the cache removed the blob first, it is fetched once more."""
    for attempt in (1, 2):
        local = fetch(group[0].path)
        try:
            for f in group:
                share.place_file(local, path, f.path, size=f.size)
                progress.file_done(f.path, f.size)
            return
        except FileNotFoundError:
            if attempt == 2 or local.exists():
                raise
            log.info("%s left the download cache before it was placed: fetching it again", local)
        finally:
            remove_local_copy(local, cache_dir)


def unet_config(path: Path) -> dict:
    """The config of the UNet in `path`'s `unet` folder."""
    return json.loads((path / "unet" / "config.json").read_text())


def download_to_share(
    source: ModelSource, progress: DownloadProgress, *, reuse: bool = True
) -> Manifest:
    """Fetches the model and its extras onto the share, then writes the manifest.

    With `reuse`, unchanged files stay; `pull_model --force` passes reuse=False."""
    api = HfApi(endpoint=source.endpoint, token=source.token)
    commit = extras.commit_of(api, source.model_id, source.revision)
    entries = api.list_repo_tree(source.model_id, revision=commit, recursive=True)
    repo_files = [_model_file(e) for e in entries if isinstance(e, RepoFile)]
    path = source.path
    previous = share.read_manifest(path) if reuse else None
    origins = {f.path: extras.Origin(source.model_id, commit, f.path) for f in repo_files}

    def fetch(share_path: str) -> Path:
        origin = origins.get(share_path) or extras.Origin(source.model_id, commit, share_path)
        return Path(
            hf_hub_download(
                origin.repo,
                origin.file,
                revision=origin.commit,
                cache_dir=source.cache_dir,
                endpoint=source.endpoint,
                token=source.token,
                tqdm_class=progress.hook(share_path),
            )
        )

    index_entry = next((f for f in repo_files if f.path == MODEL_INDEX), None)
    index_copy = None
    if index_entry is not None and share.already_placed(path, previous, index_entry):
        model_index = json.loads((path / MODEL_INDEX).read_text())
    else:
        index_copy = fetch(MODEL_INDEX)
        model_index = json.loads(index_copy.read_text())
    try:
        files = wanted_files(repo_files, model_index, source.variant)
        needed = extras.resolve(api, source.adapters, source.decoder, model_index)
        origins |= needed.origins
        files += needed.files
        inpaint_record = None
        if source.inpaint is not None:
            unet_files, unet_origins, inpaint_record = inpaint_unet(
                api, source.inpaint, source.variant
            )
            origins |= unet_origins
            files += unet_files
        missing = [f for f in files if not share.already_placed(path, previous, f)]
        progress.start(sum(f.size for f in missing))
        log.info(
            "downloading %s@%s: %d of %d files (%d adapters%s%s)",
            source.model_id, commit[:12], len(missing), len(files), len(needed.adapters),
            ", the tiny decoder" if needed.decoder else "",
            ", the inpainting UNet" if inpaint_record else "",
        )  # fmt: skip
        path.mkdir(parents=True, exist_ok=True)
        share.forget_manifest(path)
        pool = ThreadPoolExecutor(max_workers=source.workers, thread_name_prefix="download")
        try:
            futures = [
                pool.submit(fetch_and_place, group, fetch, path, source.cache_dir, progress)
                for group in same_blob_groups(missing)
            ]
            for future in futures:
                future.result()
        finally:
            # On failure, files not yet started are skipped.
            pool.shutdown(wait=True, cancel_futures=True)
    finally:
        # Placed and removed with the others, unless the pull failed before.
        if index_copy is not None:
            remove_local_copy(index_copy, source.cache_dir)

    if inpaint_record is not None:  # unusable: the pull fails, no manifest says complete
        inpainting.check_fits(unet_config(path / inpaint_record.folder), unet_config(path))
    manifest = share.write_manifest(
        path,
        model_id=source.model_id,
        requested_revision=source.revision,
        commit=commit,
        variant=source.variant,
        files=files,
        adapters=needed.adapters,
        decoder=needed.decoder,
        inpaint=inpaint_record,
    )
    share.remove_leftovers(path, keep={f.path for f in files})
    return manifest
