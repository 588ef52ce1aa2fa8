"""Helpers for tests that call the image service's loader in process (no server)."""

import time
from pathlib import Path

import pytest
from django.test import override_settings

from imagegen import backend
from imagegen.backend import Backend
from imagegen.generation.images import ImageStore
from imagegen.generation.jobs import JobQueue
from imagegen.generation.rates import LocalRates
from imagegen.generation.shared_runs import LocalRuns
from imagegen.model.adapters import parse_adapters
from imagegen.model.decoder import parse_decoder
from imagegen.model.hub import ModelSource
from imagegen.model.inpaint import parse_inpaint
from imagegen.model.loader import ModelLoader
from imagegen.model.pipeline import LoadOptions
from imagegen.webhooks.outbox import DiskOutbox
from tests.support.local_hub import LocalHub
from tests.support.model_service import SD_REPO


def new_loader(
    hub,
    share: Path,
    cache: Path,
    *,
    adapters: str = "",
    decoder: str = "full",
    decoder_repo: str = "",
    inpaint: str = "",
    options: LoadOptions | None = None,
) -> ModelLoader:
    """A process's loader on this share (every one starts not_started), with the settings
    model_service_env gives the app (MODEL_ID, MODEL_REVISION, MODEL_VARIANT, DEVICE=cpu);
    `adapters`, `decoder`, `decoder_repo` and `inpaint` are MODEL_ADAPTERS, VAE_DECODER,
    VAE_DECODER_REPO and INPAINT_MODEL_ID, parsed and passed as imagegen.backend.model_source
    does. A new process is a new loader on the same share with a fresh `cache`
    (DOWNLOAD_CACHE_DIR)."""
    source = ModelSource(
        model_id=SD_REPO, revision="main", variant="fp16", model_dir=share, cache_dir=cache,
        endpoint=hub.url, adapters=parse_adapters(adapters),
        decoder=parse_decoder(decoder, decoder_repo), inpaint=parse_inpaint(inpaint, "main"),
    )  # fmt: skip
    return ModelLoader(source, "cpu", options)


def wait_for(loader: ModelLoader, states: set[str], timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while (state := loader.status().state) not in states:
        assert time.monotonic() < deadline, loader.status()
        time.sleep(0.02)
    return state


def local_backend(
    loader: ModelLoader, images: Path, *, load_timeout: float = 60, throughput: float = 0.0
) -> Backend:
    """An in-process web process's backend on `loader`: its model, a JobQueue on it
    (GEN_LOAD_TIMEOUT: `load_timeout`; the generation rules the app has under
    model_service_env: its MODEL_ID and MODEL_ADAPTERS, GEN_DEFAULT_STEPS=2; GEN_THROUGHPUT:
    `throughput`), the images in `images`, its own runs, rates and webhook outbox."""
    with override_settings(
        MODEL_ID=loader.source.model_id,
        MODEL_ADAPTERS=loader.source.adapters,
        GEN_DEFAULT_STEPS=2,
    ):
        rules = backend.rules_from_settings()
    store = ImageStore(images)
    queue = JobQueue(loader, store, queue_max=2, load_timeout=load_timeout, keep=10, rules=rules,
                     throughput=throughput)  # fmt: skip
    return Backend(
        jobs=queue, models=loader, loader=loader, images=store, runs=LocalRuns(ttl_seconds=60),
        rates=LocalRates(), webhooks=DiskOutbox(images / "webhooks"),
    )  # fmt: skip


def install(built: Backend, monkeypatch: pytest.MonkeyPatch) -> Backend:
    """`built` is the process's backend (what the routes hand the services) until the test
    ends; the one before it after."""
    monkeypatch.setattr(backend, "_installed", built)
    return built


def serve(
    loader: ModelLoader,
    images: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    load_timeout: float = 60,
    throughput: float = 0.0,
) -> JobQueue:
    """Makes `loader` this process's model for the routes, imagegen.services and
    imagegen.selectors: a backend built on it (local_backend) installed for the test. What a
    route answers is then the service call's return value or its ServiceError (config/api.py
    turns that into the status, message and Retry-After). Answers the backend's JobQueue."""
    built = local_backend(loader, images, load_timeout=load_timeout, throughput=throughput)
    install(built, monkeypatch)
    assert isinstance(built.jobs, JobQueue)
    return built.jobs


def pulled_loader(hub_root: Path, work: Path) -> ModelLoader:
    """A loader whose model was pulled from a hub of `hub_root` onto a share in `work` and
    loaded: what a module's in-process tests share (the hub is gone after: the share has it)."""
    share = work / "share"
    share.mkdir()
    with LocalHub(hub_root) as hub:
        return ready_loader(hub, share, work / "cache")


def ready_loader(hub, share: Path, cache: Path, **settings: str) -> ModelLoader:
    """new_loader's loader (with its `settings`) with its model pulled from `hub` onto
    `share` and loaded."""
    loaded = new_loader(hub, share, cache, **settings)
    assert loaded.pull()
    assert wait_for(loaded, {"ready", "failed"}) == "ready", loaded.status()
    return loaded
