"""Which UNet the pipeline runs: the base model's, or the inpainting checkpoint's.

One is in memory at a time. An SDXL UNet is about 10 GB in fp32, the rest about 3 GB. Both
UNets need 23 GB, past a 16 GiB container. So a job needing the other one swaps them, and the
peak stays about one model. Only a change of job kind costs a UNet load.

The swap runs inside the job, and jobs run one at a time per process. So no generation sees
the UNet change. The lock only stops two callers loading at once."""

import gc
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from imagegen.model.adapters import give_back_freed_memory
from imagegen.model.edit_pipelines import set_unet

log = logging.getLogger(__name__)

BASE, INPAINT = "base", "inpaint"


class UnetSwap:
    """The pipeline's UNet, one of `loaders`' kinds at a time; BASE is resident at first."""

    def __init__(self, pipe: Any, loaders: Mapping[str, Callable[[], Any]]) -> None:
        self._pipe = pipe
        self._loaders = dict(loaders)
        self._lock = threading.Lock()
        self._resident: str | None = BASE

    @property
    def resident(self) -> str | None:
        """The kind in memory; None after a failed load, so the next use loads again."""
        return self._resident

    def use(self, kind: str) -> None:
        """Makes the `kind` UNet the pipeline's, freeing the resident one before loading it."""
        with self._lock:
            if self._resident == kind:
                return
            previous = self._resident
            log.info("swapping the UNet: %s out, %s in", previous, kind)
            self._drop()
            try:
                set_unet(self._pipe, self._loaders[kind]())
            except Exception as error:
                # Back to the previous UNet: one bad file fails only the jobs that need it.
                # Otherwise every later job would pay a full load.
                log.exception("the %s UNet could not be loaded; %s back in", kind, previous)
                self._drop()
                if previous is not None:
                    set_unet(self._pipe, self._loaders[previous]())
                    self._resident = previous
                named = "INPAINT_MODEL_ID's UNet" if kind == INPAINT else "the model's UNet"
                raise RuntimeError(f"{named} could not be loaded: {error}") from error
            self._resident = kind

    def _drop(self) -> None:
        """Frees the resident UNet (every pipeline's reference) before another is loaded."""
        self._resident = None
        set_unet(self._pipe, None)
        gc.collect()  # the old UNet's modules hold reference cycles (hooks, processors)
        give_back_freed_memory()
