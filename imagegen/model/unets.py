"""Which UNet the pipeline runs: the base model's, or the inpainting checkpoint's.

The inpainting one (INPAINT_MODEL_ID, imagegen.model.inpaint) serves edits with a mask. One is
in memory at a time. An SDXL UNet is about 10 GB in fp32, the rest of the pipeline about 3 GB.
Both UNets need 23 GB, past a 16 GiB container. So a job needing the other UNet swaps them.
Every reference to the resident one is dropped first, including the edit pipelines'
(imagegen.model.edit_pipelines.set_unet). Its memory goes back to the system. Then the other
loads by the pipeline's streaming loader (imagegen.model.pipeline.load_unet). So the peak
stays about one model. Each change of job kind costs one UNet load; same-kind jobs pay
nothing. The VAE, text encoders and tiny decoder stay.

Jobs run one at a time per process, and the swap happens inside the job before generating. So
no generation runs while the UNet changes. The lock only stops two callers loading at once."""

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
