"""Imports the model-loading code at worker start, before the first request.

Loading a pipeline for the first time imports about 1,600 modules (diffusers' pipelines and
models, transformers' CLIP, accelerate, and through them torch._dynamo and sympy). An import
holds the GIL through each unmarshal and module body, for up to 200 ms at a time, so done
during a load in the worker they stalled /health past the platform's probe budget
(docs/performance.md). Done here, they cost a few seconds of start-up instead, while the
worker is not yet answering.
"""

import importlib
import logging
import time

log = logging.getLogger(__name__)

# What DiffusionPipeline.from_pretrained reaches for an SD 1.5 or SDXL repo: modules it
# imports directly, and classes it resolves through diffusers' and transformers' lazy modules
# (resolving one imports the module defining it).
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
    log.info("model-loading code imported in %.1f s", seconds)
    return seconds
