"""How long a generation would take here, from what this deployment measured.

A synchronous request that cannot finish in GEN_SYNC_TIMEOUT is told so at once, not by a 504
later. Each stage counts at its fastest of the last KEPT images of a size, so one slow image
refuses nothing. The rules: docs/image-api.md, "Estimates"."""

import heapq
import math
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from imagegen.generation.hires import steps_run as hires_steps_run
from imagegen.generation.images import ImageRecord
from imagegen.generation.parameters import steps_run, steps_running
from imagegen.generation.presets import NO_GUIDANCE
from imagegen.generation.requests import EditRequest, GenerationRequest
from imagegen.generation.upscale_request import UpscaleRequest, network_pixels

Size = tuple[int, int]
KEPT = 3  # images kept per size
NO_INPUT = "0" * 64  # the input of a hires fix's second pass, costed as an edit's


@dataclass(frozen=True)
class Timing:
    """One image's measured stages, at its size."""

    width: int
    height: int
    encode_seconds: float
    step_seconds: float  # one denoising step, per image in the UNet's batch
    decode_seconds: float
    # The VAE's encode of an edit's input: counted, or 0 when measured (encode_seconds holds it).
    image_encode_seconds: float = 0.0
    edit: bool = False  # measured by an edit: its encode_seconds holds its input's encode

    @property
    def size(self) -> Size:
        return self.width, self.height


def fastest(timings: Iterable[Timing]) -> Timing:
    """Each stage at its fastest among the images of one size."""
    kept = list(timings)
    encode = min(kept, key=lambda t: (t.encode_seconds, t.edit))
    return Timing(
        width=kept[0].width,
        height=kept[0].height,
        encode_seconds=encode.encode_seconds,
        edit=encode.edit,
        step_seconds=min(t.step_seconds for t in kept),
        decode_seconds=min(t.decode_seconds for t in kept),
    )


@dataclass(frozen=True)
class Measurements:
    timings: tuple[Timing, ...]  # one a size measured: its last KEPT images, fastest()
    native: Size | None  # the size of a request that names none, once one ran
    # The model's counted work at its native size: stands for every size until one is measured.
    counted: Timing | None = None


def unet_batch(guidance: float) -> int:
    """Two with guidance above 1 (diffusers adds the unconditional pass), else one."""
    return 2 if guidance > NO_GUIDANCE else 1


def measured(image: ImageRecord, *, home: str) -> Timing | None:
    """None for a job run off this process's device: force_cpu costs what no other job does."""
    parameters, timings = image.parameters, image.timings
    stages = ("encode_seconds", "denoise_seconds", "decode_seconds")
    if image.device != home or not all(stage in timings for stage in stages):
        return None
    if parameters.hires is not None:  # its stages ran at two sizes
        return None
    # An edit measured the steps it ran at its working size.
    steps = steps_running(parameters)
    per_step = timings["denoise_seconds"] / steps / unet_batch(parameters.guidance)
    width, height = parameters.width, parameters.height
    if parameters.edit is not None and parameters.edit.only_masked is not None:
        width, height = parameters.edit.only_masked.size
    return Timing(
        width=width,
        height=height,
        encode_seconds=timings["encode_seconds"],
        step_seconds=per_step,
        decode_seconds=timings["decode_seconds"],
        edit=parameters.edit is not None,
    )


class TimingBook(Protocol):
    """Where measurements are kept: this process, or Redis for every replica and worker."""

    def record(self, timing: Timing, *, native: bool) -> None:
        """`native`: the request named no size, so this is the model's own."""

    def count(self, timing: Timing) -> None:
        """Keeps the counted work until a size is measured."""

    def measurements(self) -> Measurements: ...


class LocalTimings:
    """This process's measurements: at most KEPT per size."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_size: dict[Size, deque[Timing]] = {}
        self._native: Size | None = None
        self._counted: Timing | None = None

    def count(self, timing: Timing) -> None:
        with self._lock:
            self._counted = timing

    def record(self, timing: Timing, *, native: bool) -> None:
        with self._lock:
            self._by_size.setdefault(timing.size, deque(maxlen=KEPT)).append(timing)
            if native:
                self._native = timing.size

    def measurements(self) -> Measurements:
        with self._lock:
            timings = tuple(fastest(kept) for kept in self._by_size.values())
            return Measurements(timings, self._native, self._counted)


@dataclass(frozen=True)
class Cost:
    """One image's estimated stages."""

    steps: int
    encode_seconds: float  # the prompt's, and an edit's input image's
    step_seconds: float  # one of its steps, its batch included
    decode_seconds: float
    size: Size
    basis: Size  # the measured (or counted) size it is scaled from
    counted: bool  # from the model's counted work: nothing measured here yet

    @property
    def seconds(self) -> float:
        return self.encode_seconds + self.steps * self.step_seconds + self.decode_seconds

    def left(self, steps_done: int) -> float:
        """What is left after `steps_done` steps (None: all of it)."""
        if steps_done <= 0:
            return self.seconds
        return max(0, self.steps - steps_done) * self.step_seconds + self.decode_seconds


def image_cost(measurements: Measurements, request: GenerationRequest) -> Cost | None:
    """One image of `request` (defaults filled in), or None when nothing is known for it yet."""
    if request.upscale is not None:
        return upscale_cost(request)
    if request.hires is not None:
        return hires_cost(measurements, request)
    counted = measurements.counted
    size = request.size or measurements.native or (counted.size if counted else None)
    steps, guidance = request.steps, request.guidance
    timings = measurements.timings or ((counted,) if counted else ())
    if size is None or not timings or steps is None or guidance is None:
        return None
    if (edit := request.edit) is not None:  # what an edit runs (imagegen.generation.parameters)
        steps = steps_run(steps, edit.strength)
        if edit.only_masked is not None:
            size = edit.only_masked.size
    pixels = _pixels(size)
    basis = min(
        timings,
        key=lambda t: (abs(math.log(pixels / (t.width * t.height))), -t.width * t.height),
    )
    image_encode = 0.0
    # An edit's input encode, unless its basis is a measured edit, which already holds one.
    if edit is not None and counted is not None and not basis.edit:
        image_encode = counted.image_encode_seconds * pixels / _pixels(counted.size)
    scale = pixels / (basis.width * basis.height)
    return Cost(
        steps=steps,
        encode_seconds=basis.encode_seconds + image_encode,
        step_seconds=basis.step_seconds * scale * unet_batch(guidance),
        decode_seconds=basis.decode_seconds * scale,
        size=size,
        basis=basis.size,
        counted=not measurements.timings,
    )


def upscale_cost(request: GenerationRequest) -> Cost:
    """An upscale's documented guess (UpscaleRequest.estimated_seconds), one step of it."""
    assert request.upscale is not None, "an upscale's request"
    size = request.upscale.width, request.upscale.height
    return Cost(
        steps=1, encode_seconds=0.0, step_seconds=request.upscale.estimated_seconds(),
        decode_seconds=0.0, size=size, basis=size, counted=True,
    )  # fmt: skip


def hires_upscale(request: GenerationRequest) -> GenerationRequest | None:
    """The upscale job that does what a hires fix's network does (its first pass's picture to
    the target): what POST /upscale would queue for it. None for a latent mode or a filter."""
    hires, first = request.hires, request.size
    if hires is None or hires.path is None or first is None:
        return None
    scale = hires.size[0] / first[0]  # as the hires fix asks its upscaler (hires_render)
    upscale = UpscaleRequest(
        source=NO_INPUT, upscaler=hires.upscaler, scale=scale, width=hires.size[0],
        height=hires.size[1], source_width=first[0], source_height=first[1],
        network_pixels=network_pixels(first, scale),
    )  # fmt: skip
    return GenerationRequest(prompt="", upscale=upscale)


def hires_cost(measurements: Measurements, request: GenerationRequest) -> Cost | None:
    """A hires fix's three phases as one image: the first pass at its size, the second at the
    target as an edit of it (its input's encode counted, so an upscaler's decode and encode
    are), its steps those it runs; the per-step figure is their mean, so steps left count. A
    network's own time is its upscale job's estimate (upscale_cost): one rule for both."""
    hires = request.hires
    if hires is None or request.steps is None:
        return None
    first = image_cost(measurements, request.model_copy(update={"hires": None}))
    steps = hires_steps_run(hires.steps or request.steps, hires.denoising_strength)
    second = image_cost(
        measurements,
        request.model_copy(update={"hires": None, "size": hires.size, "steps": steps,
                                   "edit": EditRequest(source=NO_INPUT, strength=1.0)}),
    )  # fmt: skip
    if first is None or second is None:
        return None
    denoise = first.steps * first.step_seconds + second.steps * second.step_seconds
    # An upscaler's picture is decoded and encoded again; a filter's own time is not counted.
    image_encode = max(0.0, second.encode_seconds - first.encode_seconds)
    upscale = hires_upscale(request)
    network = 0.0 if upscale is None else upscale_cost(upscale).seconds
    return Cost(
        steps=first.steps + second.steps,
        encode_seconds=first.encode_seconds,
        step_seconds=denoise / (first.steps + second.steps),
        decode_seconds=second.decode_seconds
        + (0.0 if hires.latent else first.decode_seconds + image_encode + network),
        size=hires.size,
        basis=second.basis,
        counted=first.counted,
    )


def _pixels(size: Size) -> int:
    return size[0] * size[1]


@dataclass(frozen=True)
class Ahead:
    """A job before the request: running (`steps_done`) or waiting (None)."""

    request: GenerationRequest
    steps_done: int | None = None


@dataclass(frozen=True)
class Estimate:
    seconds: float  # until the request's last image is done, the jobs ahead included
    queue_seconds: float  # before its first image starts: the jobs ahead
    image_seconds: float  # one of its images
    count: int
    steps: int
    size: Size
    basis: Size  # the measured (or counted) size its figures are scaled from
    counted: bool = False  # from the model's counted work: nothing measured here yet
    load_seconds: float = 0.0  # loading its model first (a swap), in queue_seconds


def estimate(
    measurements: Measurements,
    request: GenerationRequest,
    *,
    ahead: list[Ahead],
    workers: int,
    count: int = 1,
    load_seconds: float = 0.0,
) -> Estimate | None:
    """How long `count` images would take behind `ahead` on `workers` workers, its model
    loaded first in `load_seconds` by the first worker free.

    None without a measurement. A job ahead whose cost is unknown counts as nothing."""
    cost = image_cost(measurements, request)
    if cost is None:
        return None

    def seconds(job: Ahead) -> float:
        found = image_cost(measurements, job.request)
        if found is None:
            return 0.0
        return found.seconds if job.steps_done is None else found.left(job.steps_done)

    running = [seconds(job) for job in ahead if job.steps_done is not None]
    # When each worker is next free; a running job holds a worker whatever the count says.
    free = running + [0.0] * max(0, max(1, workers) - len(running))
    heapq.heapify(free)
    for job in ahead:
        if job.steps_done is None:
            heapq.heappush(free, heapq.heappop(free) + seconds(job))
    heapq.heappush(free, heapq.heappop(free) + load_seconds)
    queue, finish = free[0], 0.0
    for _ in range(count):
        done = heapq.heappop(free) + cost.seconds
        heapq.heappush(free, done)
        finish = max(finish, done)
    return Estimate(
        seconds=finish,
        queue_seconds=queue,
        image_seconds=cost.seconds,
        count=count,
        steps=cost.steps,
        size=cost.size,
        basis=cost.basis,
        counted=cost.counted,
        load_seconds=load_seconds,
    )
