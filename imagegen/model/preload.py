"""Imports the model-loading code at worker start, before the first request, then freezes it.

A first load imports about 1,600 modules, each holding the GIL up to 200 ms. During a load
they stalled /health past the probe budget (docs/performance.md)."""

import gc
import importlib
import logging
import time

log = logging.getLogger(__name__)

# What DiffusionPipeline.from_pretrained reaches for an SD 1.5 or SDXL repo. Resolving a lazy class
# imports its module.
MODULES = ("accelerate", "diffusers.guiders", "imagegen.model.pipeline", "imagegen.model.weights",
           "imagegen.model.attention")  # fmt: skip
CLASSES = {
    "diffusers": ("StableDiffusionPipeline", "StableDiffusionXLPipeline", "UNet2DConditionModel",
                  "AutoencoderKL", "PNDMScheduler", "EulerDiscreteScheduler"),
    "transformers": ("CLIPTextModel", "CLIPTextModelWithProjection", "CLIPTokenizer"),
}  # fmt: skip


def import_loading_code() -> float:
    """Imports MODULES and CLASSES (and what they import); returns the seconds it took."""
    started = time.perf_counter()
    for name in MODULES:
        importlib.import_module(name)
    for package, names in CLASSES.items():
        module = importlib.import_module(package)
        for name in names:
            getattr(module, name)
    seconds = time.perf_counter() - started
    frozen = freeze_what_start_made()
    log.info("model-loading code imported in %.1f s; %d objects frozen", seconds, frozen)
    return seconds


def freeze_what_start_made() -> int:
    """What the start imported lives as long as the process (about 480,000 objects), yet each
    full collection walks it with the GIL held: the job board's after every cancelled or
    failed job, a freed model's, and Python's own. Frozen, they walk only what came after
    (bench/gc_bench.py). Never after a load: a pipeline's modules hold reference cycles that
    freeing the model must still collect."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
