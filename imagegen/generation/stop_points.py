"""Where a running generation can be stopped: before each part of the UNet's blocks and of
the VAE's decoder and encoder, not only at a denoising step's end.

Why: a step is one UNet call, and on a CPU one call of SDXL at 1024x1024 takes half a minute
(at 2048x2048, minutes); the decode after the last step is as long again. A cancel that waits
for the step's end leaves the queue blocked that long. A forward pre-hook runs before every
call of its module, so hooks on the blocks (down, mid, up) and on the parts within them
(resnets, attention transformers and each of their layers, samplers), and on the decoder
(called once per tile when it decodes in tiles) and its parts, let a cancel stop the
pipeline's call within one such part.

The hooks are registered once per pipeline, the first time a generation runs on it (so a
pipeline built elsewhere, by a test, is covered too; a UNet swapped in later gets its own at
its first generation), and read one slot: the running
generation's check, or None between generations, when they do nothing. The check is the job's
flag read (imagegen.generation.execution.Report.stop_requested), so a hook costs a few
microseconds (torch's hook dispatch, a call, an attribute read): about a millisecond for the
389 points of an SDXL UNet call that takes half a minute or more.
Generations on a pipeline run one at a time (the queue's one worker thread, or a worker
process's one job), so one slot per pipeline is enough.

Raising from a hook unwinds the pipeline's call like any error: nothing of it is kept (the
scheduler's state is set again by the next call's set_timesteps, imagegen.generation.render
puts the model's own scheduler back), so the next job runs on the same pipeline as if the
stopped one had never started.
"""

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_INSTALLED = "_imagegen_stop_points"  # the pipeline's attribute holding its StopPoints


class StopPoints:
    """The hooks of one pipeline, and the check they run while a generation is watched."""

    def __init__(self, pipe: Any) -> None:
        self._check: Callable[[], None] | None = None
        # Weakly: a UNet swapped out (imagegen.model.unets) must be freed, hooks and all.
        self._covered: weakref.WeakSet[Any] = weakref.WeakSet()
        self.cover(pipe)

    def cover(self, pipe: Any) -> None:
        """Hooks on those of the pipeline's stoppable modules that have none: all of them at
        first, then a UNet swapped in."""
        for module in stoppable_modules(pipe):
            if module not in self._covered:
                module.register_forward_pre_hook(self._before)
                self._covered.add(module)

    @property
    def modules(self) -> list[Any]:
        """The modules hooked, of those still alive."""
        return list(self._covered)

    def _before(self, _module: Any, _args: Any) -> None:
        check = self._check
        if check is not None:
            check()

    @contextmanager
    def watching(self, check: Callable[[], None]) -> Iterator[None]:
        """Runs `check` before every stoppable part while the body runs; it stops the
        generation by raising."""
        self._check = check
        try:
            yield
        finally:
            self._check = None


def stop_points(pipe: Any) -> StopPoints:
    """The pipeline's stop points, registered on its first call here, and on the modules of
    a UNet swapped in since (imagegen.model.unets) at the first call after."""
    points = getattr(pipe, _INSTALLED, None)
    if points is None:
        points = StopPoints(pipe)
        setattr(pipe, _INSTALLED, points)
    else:
        points.cover(pipe)
    return points


def stoppable_modules(pipe: Any) -> list[Any]:
    """The modules a cancel can stop before: within the UNet's down, mid and up blocks, within
    the VAE's decoder (the full one's and the tiny one's) and within its encoder (an edit's
    input: 4.9 TFLOP for SDXL at 1024x1024, about a minute on a CPU), every module made of
    others (a block, a resnet, an attention transformer, one of its layers, a sampler; the
    decoder itself, once per tile), never a single layer (a convolution, a linear), and
    never a ModuleList, which holds modules but is never called. On SDXL at 1024x1024 that
    is 389 points a UNet call, and the longest stretch between two was 4.3 s in the UNet and
    3.4 s in a decoder tile on 2 busy vCPU (docs/performance.md, docs/image-api.md):
    the most a cancel waits. A
    pipeline without those attributes gets no points there: its step ends stay."""
    from torch import nn

    unet, vae = getattr(pipe, "unet", None), getattr(pipe, "vae", None)
    roots = [getattr(unet, name, None) for name in ("down_blocks", "mid_block", "up_blocks")]
    roots += [getattr(vae, "decoder", None), getattr(vae, "encoder", None)]
    return [
        module
        for root in roots
        if isinstance(root, nn.Module)
        for module in root.modules()
        if not isinstance(module, nn.ModuleList | nn.ModuleDict)
        and next(module.children(), None) is not None
    ]
