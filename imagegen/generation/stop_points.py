"""Where a running generation can be stopped: before each part of the UNet and the VAE.

One SDXL step on a CPU takes half a minute, too long for a cancel to wait. Forward pre-hooks
run one check per pipeline. Raising from one unwinds the call and keeps nothing."""

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_INSTALLED = "_imagegen_stop_points"  # the pipeline's attribute holding its StopPoints


class StopPoints:
    """The hooks of one pipeline, and the check they run."""

    def __init__(self, pipe: Any) -> None:
        self._check: Callable[[], None] | None = None
        # Weak, so a UNet swapped out is freed, hooks and all.
        self._covered: weakref.WeakSet[Any] = weakref.WeakSet()
        self.cover(pipe)

    def cover(self, pipe: Any) -> None:
        """Hooks the stoppable modules that have none: all at first, then a UNet swapped in."""
        for module in stoppable_modules(pipe):
            if module not in self._covered:
                module.register_forward_pre_hook(self._before)
                self._covered.add(module)

    @property
    def modules(self) -> list[Any]:
        """The hooked modules still alive."""
        return list(self._covered)

    def _before(self, _module: Any, _args: Any) -> None:
        check = self._check
        if check is not None:
            check()

    @contextmanager
    def watching(self, check: Callable[[], None]) -> Iterator[None]:
        """Runs `check` before every stoppable part while the body runs; it stops by raising."""
        self._check = check
        try:
            yield
        finally:
            self._check = None


def stop_points(pipe: Any) -> StopPoints:
    """Registered on the first call, and again for a UNet swapped in since."""
    points = getattr(pipe, _INSTALLED, None)
    if points is None:
        points = StopPoints(pipe)
        setattr(pipe, _INSTALLED, points)
    else:
        points.cover(pipe)
    return points


def stoppable_modules(pipe: Any) -> list[Any]:
    """Every composite module in the UNet's blocks and the VAE's coders; never a lone layer or
    list.

    SDXL at 1024x1024 has 389 points per UNet call; the longest gap, 4.3 s, bounds a cancel."""
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
