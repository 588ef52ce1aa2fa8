"""Files the model needs from other hub repos: MODEL_ADAPTERS' LoRAs and VAE_DECODER=tiny.

Each resolves to its repo's current commit and lands in the model's directory. The manifest
lists them and their origins. The copy is complete only when they match the settings
(`matches`), so a change makes it incomplete until the next pull."""

import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from huggingface_hub import HfApi
from huggingface_hub.errors import (
    GatedRepoError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import RepoFile

from imagegen.model import decoder as decoders
from imagegen.model.adapters import Adapter
from imagegen.model.decoder import DecoderChoice
from imagegen.model.share import AdapterRecord, DecoderRecord, Manifest, ModelFile


class ExtraNotFound(LookupError):
    """A configured adapter, decoder or inpainting checkpoint that the hub does not have."""


@dataclass(frozen=True)
class Origin:
    """Where a file on the share comes from."""

    repo: str
    commit: str
    file: str  # its path in the repo


@dataclass
class Extras:
    files: list[ModelFile] = field(default_factory=list)  # paths on the share
    origins: dict[str, Origin] = field(default_factory=dict)  # share path -> origin
    adapters: tuple[AdapterRecord, ...] = ()
    decoder: DecoderRecord | None = None


def commit_of(api: HfApi, repo: str, revision: str) -> str:
    """The commit `revision` of `repo` is at.

    huggingface_hub types ModelInfo.sha as optional, but the hub always names the commit."""
    sha = api.model_info(repo, revision=revision).sha
    if sha is None:
        raise OSError(f"the hub named no commit for {repo}@{revision}")
    return sha


def _commit(api: HfApi, repo: str, setting: str) -> str:
    return commit_of_setting(api, repo, "main", setting)


def commit_of_setting(api: HfApi, repo: str, revision: str, setting: str) -> str:
    """commit_of, refusing a missing repo by naming its `setting`."""
    try:
        return commit_of(api, repo, revision)
    except GatedRepoError as exc:
        raise ExtraNotFound(f"{setting}: {repo} is gated: accept its terms, set HF_TOKEN") from exc
    except (RepositoryNotFoundError, RevisionNotFoundError) as exc:
        at = "" if revision == "main" else f" at revision {revision}"
        raise ExtraNotFound(
            f"{setting}: the hub has no repo {repo}{at} (or it is private)"
        ) from exc


def _listed(api: HfApi, repo: str, commit: str, file: str, setting: str) -> RepoFile:
    folder = posixpath.dirname(file) or None
    try:
        for entry in api.list_repo_tree(repo, path_in_repo=folder, revision=commit):
            if isinstance(entry, RepoFile) and entry.path == file:
                return entry
    except RemoteEntryNotFoundError:  # not even its folder
        pass
    raise ExtraNotFound(f"{setting}: {repo} has no file {file} (at commit {commit[:12]})")


def resolve(
    api: HfApi, adapters: Sequence[Adapter], choice: DecoderChoice, model_index: dict[str, Any]
) -> Extras:
    """The adapters' and the decoder's files at their repos' current commits."""
    extras = Extras()
    records = []

    def add(repo: str, commit: str, file: str, path: str, setting: str) -> None:
        entry = _listed(api, repo, commit, file, setting)
        sha256 = entry.lfs.sha256 if entry.lfs else None
        extras.files.append(ModelFile(path, entry.size, sha256=sha256, blob_id=entry.blob_id))
        extras.origins[path] = Origin(repo, commit, file)

    for adapter in adapters:
        commit = _commit(api, adapter.repo, "MODEL_ADAPTERS")
        add(adapter.repo, commit, adapter.file, adapter.share_path, "MODEL_ADAPTERS")
        records.append(AdapterRecord(adapter.repo, adapter.file, commit, adapter.share_path))
    extras.adapters = tuple(records)

    repo = choice.tiny_repo(model_index)
    if repo is not None:
        setting = "VAE_DECODER_REPO" if choice.repo else "VAE_DECODER=tiny"
        commit = _commit(api, repo, setting)
        folder = decoders.share_folder(repo)
        for name in decoders.DECODER_FILES:
            add(repo, commit, name, f"{folder}/{name}", setting)
        extras.decoder = DecoderRecord(repo, commit, folder)
    return extras


def matches(
    manifest: Manifest,
    adapters: Sequence[Adapter],
    choice: DecoderChoice,
    model_index: Callable[[], dict[str, Any] | None],
) -> bool:
    """Whether the manifest's adapters and decoder are the configured ones.

    Scales do not count: they change how files fuse, not which."""
    on_share = {(a.repo, a.file) for a in manifest.adapters}
    if on_share != {(a.repo, a.file) for a in adapters}:
        return False
    if not choice.tiny:
        return manifest.decoder is None
    if manifest.decoder is None:
        return False
    return manifest.decoder.repo == choice.tiny_repo(model_index())
