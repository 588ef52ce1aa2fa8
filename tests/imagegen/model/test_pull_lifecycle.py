"""The model's lifecycle: cold pull, warm restart, lazy load, failures; then the transfer itself.

Under gunicorn, only what takes a real process: a cold pull answered over HTTP (on a share
where every lock fails), WARM_START at a process's start; a new process on a warm share is a
backend built from the settings as a start builds it, served from this process.
The rest of the state machine runs in this process: each "process" is a new ModelLoader on
the test's share with a fresh download cache (start_loader), and what a route answers is the
return value or the ServiceError of the service call it makes (tests.support.loaders.serve)."""

import contextlib
import hashlib
import io
import itertools
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
import pytest
import requests
from huggingface_hub import hf_hub_download
from huggingface_hub.utils._xet_progress_reporting import XetDownloadProgressReporter
from PIL import Image

from imagegen import selectors, services
from imagegen.backend import current_backend
from imagegen.errors import ModelDownloading, ModelFailed, ModelLoading, ModelNotPulled
from imagegen.generation.requests import GenerationRequest
from imagegen.model import share
from imagegen.model.decoder import DecoderChoice
from imagegen.model.hub import DownloadProgress, ModelSource, download_to_share, fetch_and_place
from imagegen.model.loader import ModelLoader
from imagegen.model.share import ModelFile
from tests.support.in_process import served_here
from tests.support.loaders import new_loader, serve, wait_for
from tests.support.local_hub import LocalHub
from tests.support.model_service import SD_REPO, SDXL_REPO, pull_until_ready, wait_for_state
from tests.support.processes import ROOT
from tests.support.tiny_adapters import (
    DECODER_FILES,
    KOHYA_FILE,
    LORA_REPO,
    SDXL_FILE,
    TAESD_REPO,
    TAESDXL_REPO,
    build_adapter_repos,
)
from tests.support.tiny_model import SD_FP16_FILES

WANTED = set(SD_FP16_FILES)
NOT_PULLED = "The model is not on the share yet: POST /model/pull first"


def fetched(hub) -> list[str]:
    prefix = f"/{SD_REPO}/resolve/"
    return sorted(path[len(prefix) :].split("/", 1)[1] for path in hub.file_gets())


def files_on(share: Path) -> set[str]:
    return {p.relative_to(share).as_posix() for p in share.rglob("*") if p.is_file()}


def warm(hub, tmp_path: Path) -> None:
    """What a process's pull leaves on the test's share (ModelLoader's job downloads with
    download_to_share, then loads), done here: the next process finds a complete copy."""
    download_to_share(source_for(hub.url, SD_REPO, tmp_path), DownloadProgress())
    hub.reset_log()


# --- what a new process does: under gunicorn, or a start's backend served here ---------------


def test_cold_pull_on_a_share_without_locks_fetches_only_the_variant_files_then_is_ready(
    start_app, hub, share, tmp_path
):
    # The share refuses every lock, as SMB does (a module on PYTHONPATH traps them).
    lock_log = tmp_path / "locks.log"
    support = ROOT / "tests" / "support" / "share_without_locks"
    app = start_app(PYTHONPATH=str(support), NO_LOCKS_UNDER=str(share), NO_LOCKS_LOG=str(lock_log))
    before = requests.get(app.url("/model/status")).json()
    assert before["state"] == "not_started" and before["weights_on_share"] is False
    assert before["device"] == "cpu"
    assert before["model_path"] == str(share / "testorg--tiny-sd")

    refused = requests.post(app.url("/generate"), data={"prompt": "anything"})
    assert refused.status_code == 409
    assert refused.json() == {"error": {"message": NOT_PULLED}}
    assert requests.get(app.url("/model/status")).json()["state"] == "not_started"

    response = requests.post(app.url("/model/pull"))
    assert response.status_code == 202
    assert response.json()["state"] == "downloading"  # the answer already says what runs
    status = wait_for_state(app, {"ready", "failed"})
    assert status["state"] == "ready", status
    assert status["weights_on_share"] is True
    assert status["commit"] == hub.commit(SD_REPO)
    assert status["download"]["bytes_done"] == status["download"]["bytes_total"] > 0

    assert fetched(hub) == sorted(WANTED)  # each once; no .bin, msgpack, onnx, fp32 copies
    model = share / "testorg--tiny-sd"
    assert files_on(model) == WANTED | {".manifest.json"}
    manifest = json.loads((model / ".manifest.json").read_text())
    assert {f["path"] for f in manifest["files"]} == WANTED
    assert requests.post(app.url("/model/pull")).status_code == 200  # already ready

    assert lock_log.read_text().splitlines() == ["active"]  # the trap was set, never sprung
    assert not [p for p in share.rglob("*") if "lock" in p.name.lower()]


def test_a_new_process_on_a_warm_share_starts_not_started_and_skips_the_download(
    model_env, hub, tmp_path, no_telemetry
):
    """A backend built from the settings as a start builds one, served from this process."""
    warm(hub, tmp_path)
    with served_here(**model_env) as app:
        status = requests.get(app.url("/model/status")).json()
        assert status["state"] == "not_started"
        assert status["weights_on_share"] is True
        pull_until_ready(app)
    assert hub.requests == []  # no metadata call, no file GET: loaded from the share alone


def test_warm_start_loads_from_the_share_at_process_start(start_app, hub, tmp_path, no_telemetry):
    warm(hub, tmp_path)
    app = start_app(WARM_START="1")  # a restarted process, asked to load at once
    status = wait_for_state(app, {"ready", "failed"})
    assert status["state"] == "ready"
    assert hub.requests == []  # from the share alone, without any pull


# --- the state machine in this process: each loader is a new process -------------------------


@pytest.fixture
def start_loader(
    hub, share: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_telemetry
) -> Callable[..., ModelLoader]:
    """Starts "processes" on this test's share: each a new loader with a fresh download
    cache, which the service calls then act on (the last one started)."""
    count = itertools.count()

    def start(*, load_timeout: float = 60, **settings: str) -> ModelLoader:
        loader = new_loader(hub, share, tmp_path / f"cache-{next(count)}", **settings)
        serve(loader, tmp_path / "images", monkeypatch, load_timeout=load_timeout)
        return loader

    return start


def generate(prompt: str, size: tuple[int, int] | None = None) -> bytes:
    """POST /generate's service call (synchronous); the PNG it answers."""
    request = GenerationRequest(prompt=prompt, size=size)
    _, record = services.generation_run(current_backend(), request=request, timeout=120)
    return selectors.image_png(current_backend(), image_id=record.id).read_bytes()


def pulled(loader: ModelLoader) -> dict:
    """pull_until_ready, in process: the status once ready, as GET /model/status shows it."""
    loader.pull()
    assert wait_for(loader, {"ready", "failed"}) == "ready", loader.status()
    return loader.status().model_dump(mode="json")


def test_generate_loads_the_model_from_a_warm_share_first(start_loader, hub, tmp_path):
    warm(hub, tmp_path)
    loader = start_loader()
    assert generate("a red fox", (64, 64)).startswith(b"\x89PNG")
    assert loader.status().state == "ready"
    assert hub.requests == []


def test_generate_without_weights_on_the_share_asks_for_a_pull(start_loader):
    loader = start_loader()
    with pytest.raises(ModelNotPulled) as refused:
        generate("anything")
    assert refused.value.status == 409 and refused.value.message == NOT_PULLED
    assert loader.status().state == "not_started"


def test_concurrent_pulls_share_one_download(start_loader, hub):
    loader = start_loader()
    barrier = threading.Barrier(8)
    started: list[bool] = []

    def pull() -> None:
        barrier.wait()
        started.append(services.model_pull(current_backend()))  # 202 when True, 200 when False

    threads = [threading.Thread(target=pull) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(started) == 8
    assert wait_for(loader, {"ready", "failed"}) == "ready"
    assert fetched(hub) == sorted(WANTED)
    # One job: the revision was resolved once (a second job would ask again, even if the
    # hub client's cache spared it the file bodies).
    resolved = [p for m, p in hub.requests if p == f"/api/models/{SD_REPO}/revision/main"]
    assert len(resolved) == 1


def copy_as_it_is(source: Path, target: Path) -> None:
    """A copy of `source` as it is while a download writes into it (a file renamed or
    removed meanwhile is left out)."""
    for path in sorted(source.rglob("*")):
        if path.is_file():
            copy = target / path.relative_to(source)
            copy.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                shutil.copy2(path, copy)


def test_a_download_cut_off_midway_is_never_complete_and_the_next_pull_repairs_it(
    start_loader, hub, share, tmp_path
):
    hub.throttle_bytes_per_sec = 200_000
    first = start_loader()
    assert first.pull()
    deadline = time.monotonic() + 60
    while first.status().download.bytes_done < 300_000:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    # A SIGKILL runs no code: the share stays as it is at that instant. A copy of it taken
    # now is that share, and nothing of the first pull touches the copy again.
    left = tmp_path / "left"
    copy_as_it_is(share, left)
    hub.throttle_bytes_per_sec = None  # the first pull ends on the first share, left alone
    assert wait_for(first, {"ready", "failed"}) == "ready"
    hub.reset_log()

    model = left / "testorg--tiny-sd"
    assert not (model / ".manifest.json").exists()
    placed = files_on(model)
    assert placed and not WANTED.issubset(placed)  # midway indeed
    # A temporary file the killed process was writing stays for an hour (another process could
    # still be writing it); the repair adds none of its own and leaves no other file.
    killed_partials = {name for name in placed if name.endswith(".partial")}
    second = new_loader(hub, left, tmp_path / "cache-after")  # a new process on that share
    status = second.status()
    assert status.state == "not_started" and status.weights_on_share is False
    pulled(second)
    assert files_on(model) == WANTED | {".manifest.json"} | killed_partials


def test_a_pull_removes_a_killed_writers_temporary_file_only_once_it_is_an_hour_old(
    start_loader, hub, share, tmp_path
):
    warm(hub, tmp_path)
    vae = share / "testorg--tiny-sd" / "vae"
    old = vae / ".diffusion_pytorch_model.fp16.safetensors.0123abcd.partial"
    young = vae / ".diffusion_pytorch_model.fp16.safetensors.4567cdef.partial"
    for leftover in (old, young):
        leftover.write_bytes(b"cut off")
    hour_ago = time.time() - 3601
    os.utime(old, (hour_ago, hour_ago))
    pulled(start_loader())
    assert not old.exists()
    assert young.exists()  # a process elsewhere may still be writing it


def test_failed_on_hub_error_then_a_new_pull_recovers(start_loader, hub):
    hub.fail_status = 500
    loader = start_loader()
    assert loader.pull()
    assert wait_for(loader, {"ready", "failed"}) == "failed"
    status = loader.status()
    assert status.error and "500" in status.error
    assert status.weights_on_share is False

    with pytest.raises(ModelFailed) as refused:
        generate("x")
    assert refused.value.status == 503
    assert status.error in refused.value.message

    hub.fail_status = None
    assert services.model_pull(current_backend()) is True  # 202
    retry = selectors.model_status(current_backend())  # the pull's answer
    assert retry.state == "downloading" and retry.error is None
    assert wait_for(loader, {"ready", "failed"}) == "ready"
    assert loader.status().error is None


def test_generate_during_a_download_is_refused_at_once_with_retry_after(start_loader, hub):
    hub.throttle_bytes_per_sec = 200_000
    loader = start_loader()
    assert loader.pull()
    assert wait_for(loader, {"downloading"}) == "downloading"
    started = time.monotonic()
    with pytest.raises(ModelDownloading) as refused:
        generate("too early")
    assert refused.value.status == 503
    assert "downloading" in refused.value.message
    assert refused.value.retry_after > 0  # config/api.py: the Retry-After header
    assert time.monotonic() - started < 2
    hub.throttle_bytes_per_sec = None  # the pull ends within the test
    assert wait_for(loader, {"ready", "failed"}) == "ready"


def test_a_load_longer_than_gen_load_timeout_is_503_with_retry_after(
    start_loader, hub, tmp_path, caplog
):
    warm(hub, tmp_path)
    loader = start_loader(load_timeout=0.001)  # a new process: the load starts with the job
    with caplog.at_level(logging.INFO), pytest.raises(ModelLoading) as refused:
        generate("impatient", (64, 64))
    assert refused.value.status == 503
    assert refused.value.message == "The model is still loading; try again shortly"
    assert refused.value.retry_after > 0
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []  # an expected answer, not a fault
    assert wait_for(loader, {"ready", "failed"}) == "ready"  # the load went on
    assert generate("patient", (64, 64)).startswith(b"\x89PNG")


def test_warm_start_on_an_empty_share_changes_nothing(start_loader):
    loader = start_loader()
    assert loader.warm_start() is False  # what config/wsgi.py calls with WARM_START
    status = loader.status()
    assert status.state == "not_started" and status.weights_on_share is False


# --- adapters (MODEL_ADAPTERS) and the tiny decoder (VAE_DECODER=tiny) ------------------------

ADAPTER = f"{LORA_REPO}:{KOHYA_FILE}:0.5"
ADAPTER_ON_SHARE = f"adapters/testorg--tiny-lora/{KOHYA_FILE}"
DECODER_FOLDER = "decoders/madebyollin--taesd"
DECODER_ON_SHARE = {f"{DECODER_FOLDER}/{name}" for name in DECODER_FILES}


@pytest.fixture
def extras_hub(hub, hub_root):
    """The test hub, serving the tiny LoRAs and tiny decoders beside the tiny models."""
    build_adapter_repos(hub_root, sd_repo=SD_REPO, sdxl_repo=SDXL_REPO)
    return hub


def fetched_from(hub, repo: str) -> list[str]:
    """Paths in `repo` whose bodies were fetched."""
    prefix = f"/{repo}/resolve/"
    return sorted(
        p[len(prefix) :].split("/", 1)[1] for p in hub.file_gets() if p.startswith(prefix)
    )


def test_adapters_and_the_tiny_decoder_are_pulled_beside_the_model_listed_and_loaded(
    start_loader, extras_hub, share
):
    hub = extras_hub
    loader = start_loader(adapters=ADAPTER, decoder="tiny")
    before = loader.status().model_dump(mode="json")
    assert before["adapters"] == [{"repo": LORA_REPO, "file": KOHYA_FILE, "scale": 0.5}]
    assert before["decoder"] == {"kind": "tiny", "repo": None}  # chosen at the pull

    status = pulled(loader)
    assert status["decoder"] == {"kind": "tiny", "repo": TAESD_REPO}  # SD 1.x: taesd
    assert status["adapters"] == before["adapters"]
    assert fetched_from(hub, SD_REPO) == sorted(WANTED)
    assert fetched_from(hub, LORA_REPO) == [KOHYA_FILE]  # nothing else of its repo
    assert fetched_from(hub, TAESD_REPO) == sorted(DECODER_FILES)  # no .bin, no .pth
    model = share / "testorg--tiny-sd"
    assert files_on(model) == WANTED | {ADAPTER_ON_SHARE} | DECODER_ON_SHARE | {".manifest.json"}
    manifest = json.loads((model / ".manifest.json").read_text())
    assert manifest["adapters"] == [
        {"repo": LORA_REPO, "file": KOHYA_FILE, "commit": hub.commit(LORA_REPO),
         "path": ADAPTER_ON_SHARE}
    ]  # fmt: skip
    assert manifest["decoder"] == {
        "repo": TAESD_REPO, "commit": hub.commit(TAESD_REPO), "folder": DECODER_FOLDER
    }  # fmt: skip
    listed = {f["path"]: f for f in manifest["files"]}
    lora_bytes = (hub.root / LORA_REPO / KOHYA_FILE).read_bytes()
    assert listed[ADAPTER_ON_SHARE]["sha256"] == hashlib.sha256(lora_bytes).hexdigest()
    assert (model / ADAPTER_ON_SHARE).read_bytes() == lora_bytes
    total = sum(f["size"] for f in manifest["files"])
    assert status["download"] == {"bytes_done": total, "bytes_total": total}

    png = generate("a red fox", (96, 64))
    assert Image.open(io.BytesIO(png)).size == (96, 64)

    hub.reset_log()
    warm_loader = start_loader(adapters=ADAPTER, decoder="tiny")  # a new revision, same settings
    assert warm_loader.status().weights_on_share is True
    assert pulled(warm_loader)["decoder"]["repo"] == TAESD_REPO
    assert hub.requests == []  # adapters and decoder loaded from the share alone


@pytest.mark.parametrize(
    ("change", "fetched_files"),
    [
        ({"adapters": ADAPTER}, {LORA_REPO: [KOHYA_FILE]}),
        ({"decoder": "tiny"}, {TAESD_REPO: sorted(DECODER_FILES)}),
    ],
    ids=["MODEL_ADAPTERS", "VAE_DECODER"],
)
def test_a_changed_setting_makes_the_share_incomplete_until_a_pull_fetches_only_the_change(
    start_loader, extras_hub, share, tmp_path, change, fetched_files
):
    hub = extras_hub
    warm(hub, tmp_path)  # the model alone, complete on the share

    changed = start_loader(**change)
    status = changed.status()
    assert status.state == "not_started" and status.weights_on_share is False
    with pytest.raises(ModelNotPulled) as refused:  # the model alone is not what is configured
        generate("x", (64, 64))
    assert refused.value.status == 409
    pulled(changed)
    (repo, files), = fetched_files.items()  # fmt: skip
    assert [p for p in hub.file_gets() if not p.startswith(f"/{repo}/")] == []
    assert fetched_from(hub, repo) == files

    hub.reset_log()
    back = start_loader()  # the setting as it was: incomplete again, and nothing to fetch
    assert back.status().weights_on_share is False
    pulled(back)
    assert hub.file_gets() == []
    assert files_on(share / "testorg--tiny-sd") == WANTED | {".manifest.json"}  # removed


def test_an_adapter_the_hub_does_not_have_fails_the_pull_naming_it(start_loader, extras_hub, share):
    loader = start_loader(adapters=f"{LORA_REPO}:missing.safetensors")
    assert loader.pull()
    assert wait_for(loader, {"ready", "failed"}) == "failed"
    status = loader.status()
    assert status.weights_on_share is False
    commit = extras_hub.commit(LORA_REPO)[:12]
    assert status.error == (
        f"ExtraNotFound: MODEL_ADAPTERS: {LORA_REPO} has no file missing.safetensors "
        f"(at commit {commit})"
    )
    assert not (share / "testorg--tiny-sd" / ".manifest.json").exists()


def test_an_adapter_for_another_model_fails_the_load_naming_it(start_loader, extras_hub):
    loader = start_loader(adapters=f"{LORA_REPO}:{SDXL_FILE}")  # made for the SDXL UNet
    assert loader.pull()
    assert wait_for(loader, {"ready", "failed"}) == "failed"
    status = loader.status()
    assert status.weights_on_share is True  # the files are there; the load refused them
    assert status.error.startswith(f"AdapterError: MODEL_ADAPTERS {LORA_REPO}:{SDXL_FILE}: ")


# --- the transfer, in this process: local copies, shared blobs, progress, verification --------


@pytest.fixture
def no_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    """huggingface_hub 2.4 otherwise asks HF_ENDPOINT's default (huggingface.co) for an agent
    registry before its first request; these tests talk to 127.0.0.1 only."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_TELEMETRY", True)


def source_for(endpoint: str, repo: str, tmp_path: Path, **extra) -> ModelSource:
    return ModelSource(model_id=repo, revision="main", variant="fp16", model_dir=tmp_path / "share",
                       cache_dir=tmp_path / "cache", endpoint=endpoint, **extra)  # fmt: skip


def model_files_in(cache: Path) -> list[str]:
    """Files and links in huggingface_hub's cache other than its lock files and its cache tag."""
    return sorted(
        p.relative_to(cache).as_posix()
        for p in cache.rglob("*")
        if (p.is_file() or p.is_symlink()) and ".locks" not in p.parts and p.name != "CACHEDIR.TAG"
    )


def test_after_a_cold_pull_the_download_cache_holds_no_model_file(hub, tmp_path, no_telemetry):
    source = source_for(hub.url, SD_REPO, tmp_path)
    manifest = download_to_share(source, DownloadProgress())
    assert {f.path for f in manifest.files} == WANTED
    assert model_files_in(source.cache_dir) == []
    assert list((source.cache_dir / ".locks").rglob("*.lock"))  # the hub client did lock there


def test_a_pull_failing_on_the_share_leaves_no_local_copy(hub, tmp_path, no_telemetry):
    source = source_for(hub.url, SD_REPO, tmp_path)
    (source.path / "unet/diffusion_pytorch_model.fp16.safetensors").mkdir(parents=True)
    with pytest.raises(IsADirectoryError):
        download_to_share(source, DownloadProgress())
    assert model_files_in(source.cache_dir) == []


def test_files_sharing_one_blob_are_fetched_once_and_placed_at_each_path(
    hub, tmp_path, no_telemetry
):
    source = source_for(hub.url, SDXL_REPO, tmp_path)
    manifest = download_to_share(source, progress := DownloadProgress())
    assert not [p for _, p in hub.requests if "/tokenizer_2/" in p]  # identical to tokenizer/
    for name in ("vocab.json", "merges.txt", "special_tokens_map.json", "tokenizer_config.json"):
        twin = (source.path / "tokenizer_2" / name).read_bytes()
        assert twin == (source.path / "tokenizer" / name).read_bytes()
    assert progress.bytes_done == progress.bytes_total == manifest.total_bytes
    assert model_files_in(source.cache_dir) == []


def test_a_local_copy_removed_by_another_pull_before_placing_is_fetched_again(
    hub, tmp_path, no_telemetry
):
    source = source_for(hub.url, SD_REPO, tmp_path)
    name = "unet/config.json"
    calls = []

    def fetch_then_lose_the_blob_once(filename: str) -> Path:
        local = hf_hub_download(SD_REPO, filename, revision=hub.commit(SD_REPO),
                                cache_dir=source.cache_dir, endpoint=hub.url)  # fmt: skip
        calls.append(filename)
        if len(calls) == 1:  # what a concurrent pull's clean-up does to the shared cache
            Path(os.path.realpath(local)).unlink()
        return Path(local)

    size = (hub.root / SD_REPO / name).stat().st_size
    group = [ModelFile(path=name, size=size)]
    progress = DownloadProgress()
    fetch_and_place(group, fetch_then_lose_the_blob_once, source.path, source.cache_dir, progress)
    assert calls == [name, name]
    assert (source.path / name).read_bytes() == (hub.root / SD_REPO / name).read_bytes()
    assert model_files_in(source.cache_dir) == []


def test_progress_moves_byte_by_byte_within_one_large_file(tmp_path, no_telemetry):
    """huggingface_hub writes a download in 10 MiB chunks and reports each through its
    progress hook: a 32 MiB file, throttled, shows its in-between values."""
    repo = tmp_path / "hub" / "testorg" / "large"
    (repo / "unet").mkdir(parents=True)
    (repo / "model_index.json").write_text(
        json.dumps({"unet": ["diffusers", "UNet2DConditionModel"]})
    )
    (repo / "unet" / "config.json").write_text("{}")
    large = 32 * 2**20
    (repo / "unet" / "diffusion_pytorch_model.fp16.safetensors").write_bytes(bytes(large))
    small = sum(f.stat().st_size for f in repo.rglob("*.json"))
    seen: set[int] = set()
    with LocalHub(tmp_path / "hub") as hub:
        hub.throttle_bytes_per_sec = 16_000_000  # about 2 s for the large file
        progress = DownloadProgress()
        source = source_for(hub.url, "testorg/large", tmp_path)
        pull = threading.Thread(target=download_to_share, args=(source, progress))
        pull.start()
        while pull.is_alive():
            seen.add(progress.bytes_done)
            time.sleep(0.01)
        pull.join()
    assert progress.bytes_done == progress.bytes_total == small + large
    within = sorted(v for v in seen if small < v < large)  # a per-file count never lands here
    assert len(within) >= 2, sorted(seen)


def test_a_copy_of_the_wrong_size_is_never_placed(tmp_path):
    downloaded = tmp_path / "blob"
    downloaded.write_bytes(b"x" * 100)
    model = tmp_path / "share" / "model"
    with pytest.raises(share.PlacementError, match="100 bytes copied, the hub lists 120"):
        share.place_file(downloaded, model, "unet/config.json", size=120)
    assert list(model.rglob("*")) == [model / "unet"]  # neither the file nor a partial copy
    share.place_file(downloaded, model, "unet/config.json", size=100)
    assert (model / "unet/config.json").read_bytes() == b"x" * 100


def test_a_pull_refused_by_the_file_selection_leaves_no_local_copy(tmp_path, no_telemetry):
    repo = tmp_path / "hub" / "testorg" / "pickles"
    (repo / "unet").mkdir(parents=True)
    (repo / "model_index.json").write_text(
        json.dumps({"unet": ["diffusers", "UNet2DConditionModel"]})
    )
    (repo / "unet" / "config.json").write_text("{}")
    (repo / "unet" / "diffusion_pytorch_model.bin").write_bytes(bytes(64))
    with LocalHub(tmp_path / "hub") as hub:
        source = source_for(hub.url, "testorg/pickles", tmp_path)
        with pytest.raises(OSError, match="safetensors"):
            download_to_share(source, DownloadProgress())
    assert model_files_in(source.cache_dir) == []
    assert not source.path.exists()  # the share is untouched


def test_a_xet_download_counts_each_byte_written_once():
    """huggingface_hub's Xet reporter, fed one progress report as hf_xet sends it (400 bytes
    written, 900 received): the hook counts the bytes written, and the bytes received not
    at all (without update_transfer the reporter would open a second bar and count both)."""
    progress = DownloadProgress()
    progress.start(1000)
    report = SimpleNamespace(
        total_bytes=1000, total_bytes_completed=400, total_bytes_completion_rate=None,
        total_transfer_bytes_completed=900, total_transfer_bytes_completion_rate=None,
    )  # fmt: skip
    hook = progress.hook("unet/diffusion_pytorch_model.fp16.safetensors")
    with XetDownloadProgressReporter(
        reconstruction_desc="unet", total=1000, log_level=logging.WARNING, tqdm_class=hook
    ) as reporter:
        reporter.update_progress(report)
    assert progress.bytes_done == 400


def test_the_default_tiny_decoder_of_sdxl_is_taesdxl(extras_hub, tmp_path, no_telemetry):
    source = source_for(extras_hub.url, SDXL_REPO, tmp_path, decoder=DecoderChoice("tiny"))
    manifest = download_to_share(source, DownloadProgress())
    assert manifest.decoder is not None and manifest.decoder.repo == TAESDXL_REPO
    folder = source.path / "decoders" / "madebyollin--taesdxl"
    assert sorted(p.name for p in folder.iterdir()) == sorted(DECODER_FILES)
    assert source.complete_manifest() == manifest
    assert fetched_from(extras_hub, TAESD_REPO) == []
