"""Helpers for tests that call the image service's loader in process (no server)."""

import time
from pathlib import Path

from imagegen.model.hub import ModelSource
from imagegen.model.loader import ModelLoader
from tests.support.model_service import SD_REPO


def new_loader(hub, share: Path, cache: Path) -> ModelLoader:
    """A process's loader on this share (every one starts not_started)."""
    source = ModelSource(
        model_id=SD_REPO, revision="main", variant="fp16", model_dir=share, cache_dir=cache,
        endpoint=hub.url,
    )  # fmt: skip
    return ModelLoader(source, "cpu")


def wait_for(loader: ModelLoader, states: set[str], timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while (state := loader.status().state) not in states:
        assert time.monotonic() < deadline, loader.status()
        time.sleep(0.02)
    return state
