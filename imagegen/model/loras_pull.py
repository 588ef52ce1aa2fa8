"""LORAS's files pulled onto the share with the models' rules: no file lock (each file is fetched
into the local download cache, then placed under a temporary name and renamed), a manifest per
repo folder written last, and a warm pull skips what the manifest lists at its size."""

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Protocol

from huggingface_hub import HfApi
from huggingface_hub.hf_api import RepoFile

from imagegen.model import extras, share
from imagegen.model.hub import (
    DownloadProgress,
    ModelSource,
    download_to_share,
    fetch_and_place,
    same_blob_groups,
)
from imagegen.model.loras import LoraEntry, missing, repo_path

log = logging.getLogger(__name__)


class ExtraFiles(Protocol):
    """Files pulled with the model that its state waits for (UPSCALERS: OfferedUpscalers)."""

    def missing(self) -> Sequence[object]: ...

    def pull(self) -> Sequence[object]: ...


def pull_with_loras(
    source: ModelSource,
    progress: DownloadProgress,
    *,
    reuse: bool = True,
    extras: Iterable[ExtraFiles] = (),
) -> share.Manifest:
    """The model pulled onto the share (hub.download_to_share), then its LoRAs, then `extras`:
    a pull is done, and the model may turn ready, only once all are on the share."""
    manifest = download_to_share(source, progress, reuse=reuse)
    pull_loras(source, progress)
    for extra in extras:
        extra.pull()
    return manifest


def pull_loras(source: ModelSource, progress: DownloadProgress | None = None) -> int:
    """Pulls the LoRAs of `source.loras` not yet on the share; returns how many repos it
    fetched from. Raises extras.ExtraNotFound naming LORAS for a file the repo lacks."""
    from huggingface_hub import hf_hub_download

    todo = missing(source.model_dir, source.loras)
    repos = list(dict.fromkeys(entry.repo for entry in todo))
    progress = progress or DownloadProgress()
    api = HfApi(endpoint=source.endpoint, token=source.token)
    for repo in repos:
        commit = extras.commit_of_setting(api, repo, "main", "LORAS")
        listed = {}
        for e in api.list_repo_tree(repo, revision=commit, recursive=True):
            if isinstance(e, RepoFile):
                sha256 = e.lfs.sha256 if e.lfs else None
                listed[e.path] = share.ModelFile(e.path, e.size, sha256, e.blob_id)
        wanted = _files_of(repo, source.loras)
        absent = [f for f in wanted if f not in listed]
        if absent:
            raise extras.ExtraNotFound(
                f"LORAS: {repo} has no {', '.join(absent)} (at commit {commit[:12]})"
            )
        files = [listed[f] for f in wanted]
        path = repo_path(source.model_dir, repo)
        previous = share.read_manifest(path)
        fetch_now = [f for f in files if not share.already_placed(path, previous, f)]

        def fetch(file: str, repo: str = repo, commit: str = commit) -> Path:
            return Path(
                hf_hub_download(
                    repo, file, revision=commit, cache_dir=source.cache_dir,
                    endpoint=source.endpoint, token=source.token, tqdm_class=progress.hook(file),
                )
            )  # fmt: skip

        log.info("LORAS: %s@%s: %d of %d files", repo, commit[:12], len(fetch_now), len(files))
        path.mkdir(parents=True, exist_ok=True)
        share.forget_manifest(path)
        for group in same_blob_groups(fetch_now):
            fetch_and_place(group, fetch, path, source.cache_dir, progress)
        share.write_manifest(
            path, model_id=repo, requested_revision="main", commit=commit, variant=None,
            files=files,
        )  # fmt: skip
    return len(repos)


def _files_of(repo: str, entries: Iterable[LoraEntry]) -> list[str]:
    """Every file LORAS names in `repo`: its manifest lists them all."""
    return sorted({e.file for e in entries if e.repo == repo})
