"""The estimate before anything was measured: the model's counted work over this machine's pace.

Without it, a fresh service let its first, slowest request run past its client's timeout. The
pace probe is the machine's best, so estimates run short: a refused request would not have
finished either."""

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from importlib import import_module
from pathlib import Path
from typing import Any

from imagegen.generation.estimates import Size, Timing, TimingBook
from imagegen.model.loader import ModelLoader
from imagegen.model.shelf import fp32_bytes

log = logging.getLogger(__name__)

TOKENS = 77  # CLIP's context: every prompt is padded to it
PROBE_SECONDS = 1.0  # how long the pace is measured for
AUTO_TILE = 512  # VAE_TILE_SIZE=auto counted as the tiles most deployments get
TEXT_ENCODERS = ("text_encoder", "text_encoder_2")
# What a load reads and casts a second before one was measured: SDXL's weights (about 12.9 GiB
# at fp32) loaded warm from the share in 13.4 s on the 2-vCPU development VM (docs/performance.md,
# "Steps and load"; SD 1.5 went faster).
LOAD_BYTES_PER_SECOND = float(2**30)


@dataclass(frozen=True)
class Work:
    """FLOPs of one image's stages at `size`, batch 1."""

    size: Size
    text: float  # the text encoders, all of them
    unet_call: float  # one UNet call
    decode: float  # as it runs: the tiny decoder's, or the full VAE's in its tiles
    image_encode: float  # the full VAE's encode of an input image (an edit)


def count_work(
    model: Path,
    *,
    tiny_decoder: Path | None,
    tile: int | None,
    side: int | None = None,
    whole_decode: bool = False,
) -> Work:
    """One image's work from the model's configs; `side` None is the native size.

    bench/efficiency.py counts its table with it."""
    import torch
    from diffusers import AutoencoderKL, UNet2DConditionModel

    index = json_of(model / "model_index.json")
    with torch.device("meta"), torch.inference_mode():
        unet = UNet2DConditionModel.from_config(UNet2DConditionModel.load_config(model / "unet"))
        vae = AutoencoderKL.from_config(AutoencoderKL.load_config(model / "vae"))
        tokens = torch.zeros(1, TOKENS, dtype=torch.long)
        text, hidden = 0.0, 0
        for name in TEXT_ENCODERS:
            if name not in index or index[name][1] is None or not (model / name).is_dir():
                continue
            library, class_name = index[name]
            kind = getattr(import_module(library), class_name)
            encoder = kind(kind.config_class.from_pretrained(model / name))
            text += flops(partial(encoder, tokens))
            hidden += encoder.config.hidden_size
        scale = 2 ** (len(vae.config.block_out_channels) - 1)
        side = side or unet.config.sample_size * scale
        latent = torch.empty(1, unet.config.in_channels, side // scale, side // scale)
        context = torch.empty(1, TOKENS, unet.config.cross_attention_dim or hidden)
        extra: dict[str, Any] = {}
        if unet.config.addition_embed_type == "text_time":  # SDXL's pooled text and sizes
            pooled = unet.config.projection_class_embeddings_input_dim - 6 * (
                unet.config.addition_time_embed_dim
            )
            extra["added_cond_kwargs"] = {"text_embeds": torch.empty(1, pooled),
                                          "time_ids": torch.empty(1, 6)}  # fmt: skip
        timestep = torch.tensor([999.0])
        unet_call = flops(lambda: unet(latent, timestep, encoder_hidden_states=context, **extra))
        image_encode = flops(lambda: vae.encode(torch.empty(1, 3, side, side)))
    decode = count_decode(model, side, tiny_decoder=tiny_decoder, tile=tile, whole=whole_decode)
    return Work((side, side), text, unet_call, decode, image_encode)


def count_decode(
    model: Path,
    side: int,
    *,
    tiny_decoder: Path | None = None,
    tile: int | None = None,
    whole: bool = False,
) -> float:
    """FLOPs of one image's decode, as load_pipeline decodes it.

    `tile` 0 is diffusers' own; None is auto. Tiles overlap: SDXL 1024x1024 in 512 tiles is 1.5x."""
    import torch
    from diffusers import AutoencoderKL, AutoencoderTiny

    from imagegen.model.pipeline import decode_in_tiles_of

    with torch.device("meta"), torch.inference_mode():
        vae = AutoencoderKL.from_config(AutoencoderKL.load_config(model / "vae"))
        scale = 2 ** (len(vae.config.block_out_channels) - 1)
        z = torch.empty(1, vae.config.latent_channels, side // scale, side // scale)
        if tiny_decoder is not None:
            tiny = AutoencoderTiny.from_config(AutoencoderTiny.load_config(tiny_decoder))
            return flops(lambda: tiny.decode(z))
        if not whole:
            vae.enable_tiling()
            if (tile := AUTO_TILE if tile is None else tile) > 0:
                decode_in_tiles_of(vae, tile)
        return flops(lambda: vae.decode(z))


def flops(run: Callable[[], object]) -> float:
    """2 FLOPs per multiply-add."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        run()
    return float(counter.get_total_flops())


def json_of(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def measure_throughput(device: str, seconds: float = PROBE_SECONDS) -> float:
    """FLOP/s of a 3x3 convolution like an SD UNet's first blocks, in fp32: the best run in
    `seconds`."""
    import torch

    channels, side = 320, 64
    work = 2.0 * channels * channels * 9 * side * side
    with torch.inference_mode():
        conv = torch.nn.Conv2d(channels, channels, 3, padding=1).to(device)
        x = torch.randn(1, channels, side, side, device=device)
        conv(x)
        best, until = float("inf"), time.monotonic() + seconds
        while True:
            started = time.perf_counter()
            conv(x)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            best = min(best, time.perf_counter() - started)
            if time.monotonic() >= until:
                return work / best


def counted_timing(work: Work, throughput: float) -> Timing:
    """Kept like a measured image's stages."""
    return Timing(
        width=work.size[0],
        height=work.size[1],
        encode_seconds=work.text / throughput,
        step_seconds=work.unet_call / throughput,
        decode_seconds=work.decode / throughput,
        image_encode_seconds=work.image_encode / throughput,
    )


def count_model(loader: ModelLoader, throughput: float | None) -> Timing | None:
    """The model at `throughput` (None: measured now); None until it is complete on the share."""
    manifest = loader.source.complete_manifest()
    if manifest is None:
        return None
    decoder = manifest.decoder
    started = time.monotonic()
    work = count_work(
        loader.source.path,
        tiny_decoder=loader.source.path / decoder.folder if decoder else None,
        tile=loader.options.vae_tile,
    )
    pace = throughput or measure_throughput(loader.device)
    log.info(
        "estimates before any image: %s counted at %dx%d (%.3g TFLOP a UNet call), "
        "%.3g GFLOP/s %s, in %.1f s",
        loader.source.model_id, *work.size, work.unet_call / 1e12, pace / 1e9,
        "set (GEN_THROUGHPUT)" if throughput else "measured", time.monotonic() - started,
    )  # fmt: skip
    return counted_timing(work, pace)


class CountOnce:
    """Counts the model once per process, at its load, before it is ready.

    Beside a generation, the probe would read half the pace. A failed count does not fail the
    load; one failed by Redis is tried again at the next load."""

    def __init__(self, loader: ModelLoader, book: TimingBook, throughput: float = 0.0) -> None:
        self.loader, self.book, self.throughput = loader, book, throughput
        self._done = False
        loader.at_load.append(self.count)

    def count(self) -> None:
        if self._done:
            return
        try:
            counted = count_model(self.loader, self.throughput or None)
            if counted is not None:
                self.book.count(counted)
                self._done = True
        except Exception as exc:  # an estimate's source must not fail the load
            log.warning("the model's work could not be counted: %s", exc)
            self._done = not _transient(exc)


def _transient(exc: Exception) -> bool:
    """The shared store (Redis) was away."""
    return type(exc).__module__.startswith("redis")


class LoadTimes:
    """What loading each model costs a job that waits for it: freeing the resident one and the load.

    The last one measured, else the model's fp32 size at `rate`. In process: each process
    swaps on its own."""

    def __init__(self, rate: float = LOAD_BYTES_PER_SECOND) -> None:
        self.rate = rate
        self._lock = threading.Lock()
        self._measured: dict[str, float] = {}
        self._sizes: dict[str, int] = {}

    def record(self, loader: ModelLoader, seconds: float | None) -> None:
        if seconds is not None:
            with self._lock:
                self._measured[loader.source.model_id] = seconds

    def size(self, loader: ModelLoader) -> int:
        """The model's fp32 bytes, 0 while the share holds no complete copy.

        Read from its manifest once: the queue asks for it under its lock."""
        model_id = loader.source.model_id
        with self._lock:
            if model_id in self._sizes:
                return self._sizes[model_id]
        manifest = loader.source.complete_manifest()
        size = fp32_bytes(manifest) if manifest is not None else 0
        if size:
            with self._lock:
                self._sizes[model_id] = size
        return size

    def seconds(self, loader: ModelLoader) -> float:
        with self._lock:
            measured = self._measured.get(loader.source.model_id)
        return measured if measured is not None else self.size(loader) / self.rate
