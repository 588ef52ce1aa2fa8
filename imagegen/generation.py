"""One image generation: bounded, serialised, reproducible.

One generation runs at a time per process (a second would only halve the speed of both and
double the memory); GEN_QUEUE_MAX more may wait, and the rest are refused at once with
503 + Retry-After instead of piling up on gunicorn's threads. A waiting request holds its
place while the model loads, so the queue bounds those waits too.
"""

import io
import secrets
import threading
import time
from dataclasses import dataclass
from functools import cache
from typing import Any

from django.conf import settings

from imagegen.errors import QueueFull
from imagegen.loader import ModelLoader
from imagegen.pipeline import native_size

SEED_MAX = 2**32 - 1


@dataclass(frozen=True)
class GenerationRequest:
    prompt: str
    negative_prompt: str | None = None
    steps: int | None = None
    guidance: float | None = None
    size: tuple[int, int] | None = None
    seed: int | None = None
    force_cpu: bool = False


@dataclass(frozen=True)
class GenerationResult:
    png: bytes
    seed: int
    steps: int
    guidance: float
    width: int
    height: int
    device: str
    seconds: float


class ImageGenerator:
    def __init__(
        self,
        loader: ModelLoader,
        *,
        queue_max: int,
        queue_timeout: float,
        load_timeout: float,
        default_steps: int,
        default_guidance: float,
    ) -> None:
        self.loader = loader
        self.queue_timeout = queue_timeout
        self.load_timeout = load_timeout
        self.default_steps = default_steps
        self.default_guidance = default_guidance
        self._places = threading.BoundedSemaphore(queue_max + 1)  # the running one + waiting
        self._turn = threading.Lock()

    def generate(self, request: GenerationRequest) -> GenerationResult:
        if not self._places.acquire(blocking=False):
            raise QueueFull()
        try:
            pipe = self.loader.pipeline(self.load_timeout)
            if not self._turn.acquire(timeout=self.queue_timeout):
                raise QueueFull("No turn came within GEN_QUEUE_TIMEOUT; try again later")
            try:
                return self._run(pipe, request)
            finally:
                self._turn.release()
        finally:
            self._places.release()

    def _run(self, pipe: Any, request: GenerationRequest) -> GenerationResult:
        import torch

        width, height = request.size or native_size(pipe)
        seed = request.seed if request.seed is not None else secrets.randbelow(SEED_MAX + 1)
        steps = request.steps or self.default_steps
        guidance = request.guidance if request.guidance is not None else self.default_guidance
        # force_cpu on an accelerator host: this one generation runs on the CPU.
        device = "cpu" if request.force_cpu else self.loader.device
        started = time.perf_counter()
        try:
            if device != self.loader.device:
                pipe.to(device)
            with torch.inference_mode():
                image = pipe(
                    prompt=request.prompt,
                    negative_prompt=request.negative_prompt,
                    num_inference_steps=steps,
                    guidance_scale=guidance,
                    width=width,
                    height=height,
                    # A CPU generator gives the same image for a seed on every device.
                    generator=torch.Generator("cpu").manual_seed(seed),
                ).images[0]
        finally:
            if device != self.loader.device:
                pipe.to(self.loader.device)
        seconds = time.perf_counter() - started
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        return GenerationResult(
            png=buffer.getvalue(), seed=seed, steps=steps, guidance=guidance,
            width=width, height=height, device=device, seconds=seconds,
        )  # fmt: skip


@cache
def get_generator() -> ImageGenerator:
    from imagegen.loader import get_loader

    return ImageGenerator(
        get_loader(),
        queue_max=settings.GEN_QUEUE_MAX,
        queue_timeout=settings.GEN_QUEUE_TIMEOUT,
        load_timeout=settings.GEN_LOAD_TIMEOUT,
        default_steps=settings.GEN_DEFAULT_STEPS,
        default_guidance=settings.GEN_DEFAULT_GUIDANCE,
    )
