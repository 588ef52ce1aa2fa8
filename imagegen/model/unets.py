"""Which UNet the loaded pipeline runs: the base model's, or the inpainting checkpoint's
(INPAINT_MODEL_ID, imagegen.model.inpaint) for an edit with a mask. One is in memory at a time.

Why one: an SDXL UNet is about 10 GB in fp32 and the rest of the pipeline about 3 GB; both
UNets beside each other need 23 GB, past a 16 GiB container. So the pipeline holds one UNet,
and a job that needs the other swaps them: every reference to the resident one is dropped
first (the pipeline's and those of its img2img and inpainting pipelines,
imagegen.model.edit_pipelines.set_unet) and its memory handed back to the system, then the
other is loaded from the share by the same streaming loader as the pipeline's
(imagegen.model.pipeline.load_unet: fp32, the adapters fused, attention sliced), so the peak
stays about one model. The price is one UNet load each time the kind of job changes (an
inpainting after a text-to-image or img2img job, or back); jobs of one kind in a row pay
nothing. The VAE (slicing and tiling on), the text encoders and the tiny decoder stay.

Jobs run one at a time in a process (the queue's one worker thread, a worker process's one
job), and the swap happens inside the job, before its generation starts, so no generation
ever runs while the UNet changes; the lock only keeps two callers from loading at once.
"""

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
    """The loaded pipeline's UNet, one of `loaders`' kinds at a time; BASE is resident at
    first (the pipeline was loaded with it)."""

    def __init__(self, pipe: Any, loaders: Mapping[str, Callable[[], Any]]) -> None:
        self._pipe = pipe
        self._loaders = dict(loaders)
        self._lock = threading.Lock()
        self._resident: str | None = BASE

    @property
    def resident(self) -> str | None:
        """The kind in memory; None after a load that failed (the next use loads again)."""
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
                # Back to the UNet that was there, so one bad file fails the jobs that need
                # it and not every other job after (each paying a full load).
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
