"""The memory rule between offered models (imagegen/model/shelf.py): models that fit the
memory limit together stay resident, least recently used freed first; otherwise the resident
one is freed before the next loads. A freed model is not_started again, its weights stay on
the share, and it loads again when asked. Real loaders on tiny pipelines from a local hub."""

import itertools
import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagegen.model import hub as model_hub
from imagegen.model.hub import ModelSource
from imagegen.model.loader import ModelLoader
from imagegen.model.memory import NEEDS_WITH_TILE
from imagegen.model.share import Manifest, ModelFile
from imagegen.model.shelf import ModelShelf, fp32_bytes
from tests.support.loaders import wait_for
from tests.support.local_hub import LocalHub
from tests.support.model_service import SD_REPO, SDXL_REPO

SD_COPY = "otherorg/tiny-sd"  # SD_REPO's files under another id: a third model
MODELS = (SD_REPO, SDXL_REPO, SD_COPY)


@pytest.fixture(scope="module")
def pulled(hub_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    """The three models on one share, pulled once for the module: (hub url, share, cache)."""
    root = tmp_path_factory.mktemp("hub3")
    for repo, target in ((SD_REPO, SD_REPO), (SDXL_REPO, SDXL_REPO), (SD_COPY, SD_REPO)):
        (root / repo).parent.mkdir(parents=True, exist_ok=True)
        (root / repo).symlink_to(hub_root / target)
    work = tmp_path_factory.mktemp("memory")
    with LocalHub(root) as hub:
        for repo in MODELS:
            source = source_of(repo, hub.url, work / "share", work / "cache")
            model_hub.download_to_share(source, model_hub.DownloadProgress())
        yield hub.url, work / "share", work / "cache"


def source_of(repo: str, url: str, share: Path, cache: Path) -> ModelSource:
    return ModelSource(
        model_id=repo, revision="main", variant="fp16", model_dir=share, cache_dir=cache,
        endpoint=url,
    )  # fmt: skip


def shelf_of(pulled: tuple, limit: int | None) -> ModelShelf:
    """A new process's loaders of the three models under `limit`."""
    return ModelShelf([ModelLoader(source_of(repo, *pulled), "cpu") for repo in MODELS], limit)


def load(shelf: ModelShelf, repo: str) -> None:
    loader = shelf.loader(repo)
    loader.pull()
    assert wait_for(loader, {"ready", "failed"}) == "ready"
    loader.pipeline(timeout=60)  # a job's use: the least recently used is another


def probe_room(sizes: list[int]) -> int:
    """The least limit under which models of these sizes fit together (ModelShelf.fits)."""
    return math.ceil(sum(sizes) + (NEEDS_WITH_TILE - 1) * max(sizes))


def test_models_fit_with_the_working_memory_of_the_largest_on_top():
    """A generation needs about 0.3x its model's weights beside them (memory.NEEDS_WITH_TILE):
    two models whose weights alone fit a limit may not fit with that on top."""
    shelf = ModelShelf([], limit=100)
    assert shelf.fits([40, 40])  # 80 + 12
    assert not shelf.fits([45, 45])  # 90 + 13.5: the weights alone would fit
    assert shelf.fits([76]) and not shelf.fits([77])
    assert ModelShelf([], limit=None).fits([10**12]) and not ModelShelf([], None).fits([1, 1])


def test_a_models_fp32_size_counts_half_precision_weights_twice():
    files = (
        ModelFile("unet/diffusion_pytorch_model.fp16.safetensors", 100),
        ModelFile("text_encoder/model.fp16-00001-of-00002.safetensors", 10),
        ModelFile("vae/diffusion_pytorch_model.safetensors", 7),
        ModelFile("unet/config.json", 1000),
    )
    manifest = Manifest("o/n", "main", "c" * 40, "fp16", files, "now")
    assert fp32_bytes(manifest) == 200 + 20 + 7


def test_models_that_fit_together_stay_resident(pulled):
    shelf = shelf_of(pulled, limit=10**12)
    for repo in MODELS:
        load(shelf, repo)
    assert shelf.resident() == list(MODELS)


def test_the_least_recently_used_model_is_freed_for_one_that_does_not_fit(pulled):
    """Room for two of the three: loading the third frees the one used longest ago, which
    goes back to not_started with its weights on the share, and a pull loads it again."""
    probe = shelf_of(pulled, limit=None)
    sizes = {repo: probe.size(probe.loader(repo)) for repo in MODELS}
    assert all(sizes.values())
    pairs = [[sizes[a], sizes[b]] for a, b in itertools.combinations(MODELS, 2)]
    room_for_two = max(probe_room(pair) for pair in pairs)
    assert room_for_two < probe_room(list(sizes.values()))
    shelf = shelf_of(pulled, limit=room_for_two)
    load(shelf, SD_REPO)
    load(shelf, SDXL_REPO)
    load(shelf, SD_REPO)  # used again: SDXL_REPO is now the least recently used
    load(shelf, SD_COPY)
    assert shelf.resident() == [SD_REPO, SD_COPY]
    freed = shelf.loader(SDXL_REPO).status()
    assert (freed.state, freed.weights_on_share) == ("not_started", True)
    load(shelf, SDXL_REPO)
    assert shelf.resident() == [SDXL_REPO, SD_COPY]


def test_with_room_for_one_the_resident_model_is_freed_before_the_next_loads(pulled):
    """A limit below two models, or none known: one model at a time."""
    for limit in (1, None):
        shelf = shelf_of(pulled, limit=limit)
        load(shelf, SD_REPO)
        load(shelf, SDXL_REPO)
        assert shelf.resident() == [SDXL_REPO]
        assert shelf.loader(SD_REPO).status().state == "not_started"


def test_a_model_a_job_runs_on_is_freed_only_once_the_job_ends(pulled):
    """Room for one: the next model's load waits for the running job of the resident one
    (ModelLoader.in_use, as JobQueue runs a job), so the two are never in memory together."""
    shelf = shelf_of(pulled, limit=1)
    load(shelf, SD_REPO)
    running = shelf.loader(SD_REPO)
    with running.in_use():
        incoming = shelf.loader(SDXL_REPO)
        incoming.pull()
        time.sleep(1.0)  # far longer than the tiny model's load, which is waiting
        assert incoming.status().state == "loading" and shelf.resident() == [SD_REPO]
    assert wait_for(incoming, {"ready", "failed"}) == "ready"
    assert shelf.resident() == [SDXL_REPO]


def test_two_pulls_at_once_load_one_after_the_other(pulled):
    """Room for one and two pulls started together: each load sees the one before it resident
    and frees it, so no load runs beside another (each records what else is in memory)."""
    shelf = shelf_of(pulled, limit=1)
    beside: dict[str, list[str]] = {}
    for repo in (SD_REPO, SDXL_REPO):
        loader = shelf.loader(repo)
        loader.at_load.append(lambda repo=repo: beside.setdefault(repo, shelf.resident()))
    for repo in (SD_REPO, SDXL_REPO):
        shelf.loader(repo).pull()
    for repo in (SD_REPO, SDXL_REPO):
        assert wait_for(shelf.loader(repo), {"ready", "failed", "not_started"}) != "failed"
    assert beside == {SD_REPO: [], SDXL_REPO: []}
    assert len(shelf.resident()) == 1


def test_no_new_job_starts_on_a_model_that_is_making_room(pulled):
    """A steady queue cannot keep a model resident: while room is made for another model, the
    next job on it waits, and finds it freed."""
    shelf = shelf_of(pulled, limit=1)
    load(shelf, SD_REPO)
    running = shelf.loader(SD_REPO)
    seen: list[bool] = []

    def next_job() -> None:
        with running.in_use():
            seen.append(running.resident)

    with running.in_use():
        shelf.loader(SDXL_REPO).pull()
        time.sleep(0.5)  # the incoming load is waiting for this job: room is being made
        waiting = threading.Thread(target=next_job)
        waiting.start()
        time.sleep(0.5)
        assert seen == []  # it has not started beside the running one
    waiting.join(60)
    assert seen == [False]
    assert wait_for(shelf.loader(SDXL_REPO), {"ready", "failed"}) == "ready"


def test_a_freed_model_hands_its_pages_back_to_the_system(pulled, monkeypatch):
    """Freeing a model trims malloc's kept pages (malloc_trim), so the next model's load
    replaces its memory instead of adding to it; nothing is trimmed when nothing is freed."""
    from imagegen.model import loader as loader_module

    trims: list[int] = []
    monkeypatch.setattr(loader_module, "give_back_freed_memory", lambda: trims.append(1))
    shelf = shelf_of(pulled, limit=None)
    load(shelf, SD_REPO)
    assert shelf.loader(SDXL_REPO).free() is False and trims == []  # not loaded: nothing freed
    deadline = time.monotonic() + 30  # the pull's thread ends just after the state is ready
    while not shelf.loader(SD_REPO).free():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert trims == [1]
