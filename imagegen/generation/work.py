"""The estimate before anything was measured: the model's work at its own size, counted, over
this machine's pace, measured in about a second.

Why: measured timings (imagegen.generation.estimates) come only after an image was made here,
so a fresh service let its first request, the slowest of all, run past its client's timeout.
The work of each stage is known from the model's configs alone: torch's FlopCounterMode counts
it on the meta device (2 FLOPs per multiply-add, no weight read; bench/efficiency.py counts
with it for docs/performance.md). The pace is a 3x3 convolution at a UNet's shapes run
for about a second on the model's device: the machine's best at that kind of work, so an
estimate from it is on the short side (the service's UNet calls ran at 77 % of it, its decode
at 90 %, docs/performance.md): a request it refuses would not have finished in time either.

Counted once per process, at the model's load, before it is ready (CountOnce): never beside
a generation. At the model's native size, for one image (batch 1), each stage
then scaled by the pixels as the measured ones are. GEN_THROUGHPUT, when set, is the pace
instead of the measured one.
"""

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from importlib import import_module
from pathlib import Path
from typing import Any

from imagegen.generation.estimates import Size, Timing, TimingBook
from imagegen.model.loader import ModelLoader

log = logging.getLogger(__name__)

TOKENS = 77  # CLIP's context: every prompt is padded to it
PROBE_SECONDS = 1.0  # how long the pace is measured for
AUTO_TILE = 512  # VAE_TILE_SIZE=auto counted as the tiles most deployments get
TEXT_ENCODERS = ("text_encoder", "text_encoder_2")


@dataclass(frozen=True)
class Work:
    """FLOPs of the stages of one image at `size`, batch 1."""

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
    """The work of one image of `side` x `side` (None: the model's native size) of the
    diffusers model in `model` (its configs only), its decode as count_decode counts it.
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
    """FLOPs of the decode of one `side` x `side` image of the model in `model`: by the tiny
    decoder in `tiny_decoder` if given, else by the full VAE, whole (`whole`) or in tiles of
    `tile` pixels as imagegen.model.pipeline.load_pipeline decodes (0: diffusers' own; None:
    auto, counted as AUTO_TILE). Tiles overlap and each is decoded whole: SDXL's 1024x1024
    in tiles of 512 is 1.5x the whole image's work."""
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
    """What torch's FlopCounterMode counts for `run` (2 FLOPs per multiply-add)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        run()
    return float(counter.get_total_flops())


def json_of(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def measure_throughput(device: str, seconds: float = PROBE_SECONDS) -> float:
    """FLOP/s of a 3x3 convolution of 320 channels on a 64x64 map (an SD UNet's first
    blocks at 512x512) on `device`, in fp32 as the pipeline runs: the best of as many runs as
    fit in `seconds`, after one to warm up."""
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
    """`work` at `throughput` FLOP/s, as a measured image's stages are kept."""
    return Timing(
        width=work.size[0],
        height=work.size[1],
        encode_seconds=work.text / throughput,
        step_seconds=work.unet_call / throughput,
        decode_seconds=work.decode / throughput,
        image_encode_seconds=work.image_encode / throughput,
    )


def count_model(loader: ModelLoader, throughput: float | None) -> Timing | None:
    """The loader's model counted at `throughput` FLOP/s (None: measured now on its device);
    None while the model is not complete on the share (nothing to count yet)."""
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
    """Counts the loader's model once for this process, at its load, and keeps it in `book`
    (its TimingBook). In the loading thread, before the model is ready (ModelLoader.at_load):
    never beside a generation, whose load on the CPU would halve the pace the probe reads
    and whose job the count would slow. An estimate asked before then has no counted
    figure. A count that fails is logged and does not fail the load (the measured timings
    still come); one failed by the shared store (distributed mode's Redis) is tried again at
    the next load."""

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
    """A failure worth trying again: the shared store away (distributed mode's Redis)."""
    return type(exc).__module__.startswith("redis")
