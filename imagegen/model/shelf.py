"""The offered models' loaders in one process, and the memory rule between them.

Each model is 2-13 GB at fp32, under one memory limit (imagegen.model.memory). Models that fit
together stay resident, so mixed requests do not reload them. A model that does not fit frees
the least recently used first. Sizes come from manifests, before a byte is read."""

import contextlib
import logging
import threading
import time
from collections.abc import Iterable, Iterator
from functools import partial

from imagegen import metrics
from imagegen.model.loader import ModelLoader
from imagegen.model.memory import NEEDS_WITH_TILE
from imagegen.model.share import Manifest

log = logging.getLogger(__name__)

WEIGHTS = ".safetensors"
# Bytes per parameter of a weight file's dtype, by its variant; every weight loads as fp32 (4
# bytes).
NARROW = {"fp16": 2, "bf16": 2}


def fp32_bytes(manifest: Manifest) -> int:
    """The model's weights at fp32: half-precision files count twice their size."""
    total = 0
    for f in manifest.files:
        if not f.path.endswith(WEIGHTS):
            continue
        name = f.path.rsplit("/", 1)[-1]
        narrow = next((b for v, b in NARROW.items() if f".{v}." in name or f".{v}-" in name), 4)
        total += f.size * 4 // narrow
    return total


BUSY_POLL = 0.05  # seconds between looks at a model a job still runs on


class ModelShelf:
    """The loaders of every offered model, the default's first.

    `limit` is the memory limit in bytes. None means unknown: then one model is resident."""

    def __init__(self, loaders: Iterable[ModelLoader], limit: int | None) -> None:
        self.loaders = {loader.source.model_id: loader for loader in loaders}
        self.limit = limit
        self._lock = threading.Lock()  # one model makes room at a time
        # One load at a time, from making room until resident. So two that do not fit are never read
        # in together.
        self._loading = threading.Lock()
        for loader in self.loaders.values():
            loader.load_guard = partial(self.loading, loader)

    def loader(self, model_id: str) -> ModelLoader:
        return self.loaders[model_id]

    def resident(self) -> list[str]:
        """The ids of the models in memory now."""
        return [model_id for model_id, loader in self.loaders.items() if loader.resident]

    def resident_bytes(self) -> int:
        """The fp32 bytes of the models in memory now (an upscale's tiles are sized by them)."""
        return sum(self.size(loader) for loader in self.loaders.values() if loader.resident)

    def size(self, loader: ModelLoader) -> int:
        """The model's fp32 bytes, 0 while the share holds no complete copy."""
        manifest = loader.source.complete_manifest()
        return fp32_bytes(manifest) if manifest is not None else 0

    @contextlib.contextmanager
    def loading(self, incoming: ModelLoader) -> Iterator[None]:
        """Room made for `incoming`, then its load, with no other load beside it.

        A load that ends resident is counted (imagegen.metrics): as a swap too when it freed
        another model first, the swap's seconds being the freeing and the load."""
        with self._loading:
            began = time.monotonic()
            freed = self.make_room(incoming)
            loading = time.monotonic()
            yield
            if not incoming.resident:  # failed: counted nowhere, the job says why
                return
            done = time.monotonic()
            model = incoming.source.model_id
            metrics.MODEL_LOADS.labels(model).inc()
            metrics.MODEL_LOAD_SECONDS.labels(model).inc(done - loading)
            if freed:
                metrics.MODEL_SWAPS.labels(model).inc()
                metrics.MODEL_SWAP_SECONDS.labels(model).inc(done - began)

    def fits(self, sizes: Iterable[int]) -> bool:
        """Whether these fp32 sizes fit the limit together, plus the largest one's working
        memory.

        The working memory is memory.NEEDS_WITH_TILE."""
        sizes = list(sizes)
        if self.limit is None:
            return len(sizes) <= 1
        headroom = (NEEDS_WITH_TILE - 1) * max(sizes, default=0)
        return sum(sizes) + headroom <= self.limit

    def make_room(self, incoming: ModelLoader) -> list[str]:
        """Frees resident models, least recently used first, until `incoming` fits.

        If it fits beside none, all go. Returns the ids of the models freed."""
        freed: list[str] = []
        with self._lock:
            others = sorted(
                (loader for loader in self.loaders.values()
                 if loader is not incoming and loader.resident),
                key=lambda loader: loader.last_used,
            )  # fmt: skip
            needed = self.size(incoming)
            kept = {loader: self.size(loader) for loader in others}
            held = sum(kept.values())
            for loader in others:
                if self.fits([*kept.values(), needed]):
                    break
                with loader.draining():  # its running job ends first; no new one starts on it
                    while loader.resident and not loader.free():
                        time.sleep(BUSY_POLL)
                if not loader.resident:
                    size = kept.pop(loader)
                    log.info(
                        "freed %s for %s (%d + %d bytes at fp32, limit %s)",
                        loader.source.model_id, incoming.source.model_id, held, needed,
                        self.limit,
                    )  # fmt: skip
                    held -= size
                    freed.append(loader.source.model_id)
        return freed
