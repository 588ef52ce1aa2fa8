"""Self-check: the tiny repo and LocalHub work with the real huggingface_hub and diffusers.

Plain pytest, no Django, so the support code can be trusted before fixtures build on it.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import huggingface_hub
import numpy as np
import pytest
import torch
from diffusers import DiffusionPipeline
from huggingface_hub import HfApi, RepoFile, hf_hub_download, snapshot_download
from huggingface_hub.errors import (
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from tests.support.local_hub import LocalHub
from tests.support.tiny_model import SD_FP16_FILES, build_tiny_pipeline, tree_files

REPO = "testorg/tiny-sd"
# What an fp16-variant, safetensors-only download of a diffusers repo needs: configs,
# tokenizer files and the fp16 weights; never .bin, .msgpack, onnx or the fp32 weights.
FP16_ALLOW_PATTERNS = ["model_index.json", "*/*.json", "*/merges.txt", "*/*.fp16.safetensors"]


@pytest.fixture(autouse=True)
def _no_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    """huggingface_hub 2.4 otherwise fetches an agent registry from HF_ENDPOINT (default:
    huggingface.co) while building headers; tests must only talk to 127.0.0.1."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_TELEMETRY", True)


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread() -> Iterator[None]:
    """Tiny models gain nothing from intra-op threads, and on a busy 2-core box the
    thread pool's contention makes a 2-step generation 10x+ slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def hub_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hub")
    build_tiny_pipeline(root / REPO)
    return root


@pytest.fixture
def hub(hub_root: Path) -> Iterator[LocalHub]:
    with LocalHub(hub_root) as running:
        yield running


def _load(path: str | Path) -> DiffusionPipeline:
    pipe = DiffusionPipeline.from_pretrained(
        path, variant="fp16", dtype=torch.float32, use_safetensors=True, local_files_only=True
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _generate(pipe: DiffusionPipeline, seed: int = 0) -> np.ndarray:
    result = pipe(
        "a photo of an astronaut riding a horse",
        height=64,
        width=64,
        num_inference_steps=2,
        generator=torch.Generator("cpu").manual_seed(seed),
    )
    return np.asarray(result.images[0])


def _http_get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(urllib.request.Request(url, headers=headers or {}), timeout=10) as resp:
        return resp.status, resp.read()


def test_snapshot_download_fetches_only_fp16_files_and_loads(
    hub: LocalHub, hub_root: Path, tmp_path: Path
) -> None:
    path = snapshot_download(
        REPO,
        revision="main",
        endpoint=hub.url,
        cache_dir=tmp_path / "cache",
        allow_patterns=FP16_ALLOW_PATTERNS,
    )

    assert {name for name, _ in tree_files(Path(path))} == SD_FP16_FILES
    assert Path(path).name == hub.commit(REPO)
    fetched = {p.split(f"/resolve/{hub.commit(REPO)}/", 1)[1] for p in hub.file_gets()}
    assert fetched == SD_FP16_FILES

    pipe = _load(path)
    pipe.vae.enable_slicing()
    pipe.vae.enable_tiling()
    pipe.enable_attention_slicing()
    first, second = _generate(pipe), _generate(pipe)
    assert first.shape == (64, 64, 3)
    np.testing.assert_array_equal(first, second)


def test_api_and_single_file_download(hub: LocalHub, hub_root: Path, tmp_path: Path) -> None:
    api = HfApi(endpoint=hub.url)
    info = api.model_info(REPO)
    assert info.sha == hub.commit(REPO)
    assert api.model_info(REPO, revision=hub.commit(REPO)).sha == info.sha
    assert {s.rfilename for s in info.siblings or []} == {n for n, _ in tree_files(hub_root / REPO)}

    tree = list(api.list_repo_tree(REPO, recursive=True))
    files = {f.path: f for f in tree if isinstance(f, RepoFile)}
    assert set(files) == {n for n, _ in tree_files(hub_root / REPO)}
    assert files["unet/diffusion_pytorch_model.bin"].lfs is not None
    assert files["unet/config.json"].lfs is None
    assert {f.path for f in api.list_repo_tree(REPO, path_in_repo="vae")} == {
        "vae/config.json",
        "vae/diffusion_flax_model.msgpack",
        "vae/diffusion_pytorch_model.bin",
        "vae/diffusion_pytorch_model.fp16.safetensors",
        "vae/diffusion_pytorch_model.safetensors",
    }

    local = hf_hub_download(
        REPO, "unet/config.json", endpoint=hub.url, cache_dir=tmp_path / "cache"
    )
    assert Path(local).read_bytes() == (hub_root / REPO / "unet/config.json").read_bytes()


def test_errors_map_to_huggingface_hub_exceptions(hub: LocalHub) -> None:
    api = HfApi(endpoint=hub.url)
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("testorg/missing")
    with pytest.raises(RevisionNotFoundError):
        api.model_info(REPO, revision="nope")

    hub.fail_status = 500
    with pytest.raises(HfHubHTTPError) as failed:
        api.model_info(REPO)
    assert failed.value.response.status_code == 500

    hub.fail_status = None
    hub.fail_paths = {"unet/config.json"}
    with pytest.raises(urllib.error.HTTPError) as injected:
        _http_get(f"{hub.url}/{REPO}/resolve/main/unet/config.json")
    assert injected.value.code == 500


def test_range_requests_and_throttle(hub: LocalHub, hub_root: Path) -> None:
    data = (hub_root / REPO / "unet/diffusion_pytorch_model.bin").read_bytes()
    url = f"{hub.url}/{REPO}/resolve/main/unet/diffusion_pytorch_model.bin"

    assert _http_get(url, {"Range": "bytes=10-"}) == (206, data[10:])
    assert _http_get(url, {"Range": "bytes=5-9"}) == (206, data[5:10])
    assert _http_get(url, {"Range": "bytes=0-999999999"}) == (206, data)
    with pytest.raises(urllib.error.HTTPError) as unsatisfiable:
        _http_get(url, {"Range": f"bytes={len(data)}-"})
    assert unsatisfiable.value.code == 416

    hub.throttle_bytes_per_sec = 20_000  # 4 KiB => ~0.2 s
    hub.reset_log()
    started = time.monotonic()
    assert _http_get(url) == (200, data)
    assert time.monotonic() - started > 0.15
    assert hub.file_gets() == [f"/{REPO}/resolve/main/unet/diffusion_pytorch_model.bin"]


def test_sdxl_layout_loads_and_generates(tmp_path: Path) -> None:
    repo = build_tiny_pipeline(tmp_path / "sdxl", layout="sdxl", seed=1)
    assert (repo / "text_encoder_2" / "model.fp16.safetensors").is_file()
    pipe = _load(repo)
    assert type(pipe).__name__ == "StableDiffusionXLPipeline"
    first, second = _generate(pipe, seed=3), _generate(pipe, seed=3)
    assert first.shape == (64, 64, 3)
    np.testing.assert_array_equal(first, second)


def test_build_is_deterministic(tmp_path: Path, hub_root: Path) -> None:
    again = build_tiny_pipeline(tmp_path / "again")
    assert tree_files(again) == tree_files(hub_root / REPO)
    for name, _ in tree_files(again):
        assert (again / name).read_bytes() == (hub_root / REPO / name).read_bytes(), name
