"""Live previews: the picture as it forms, made from the latents after a denoising step.

A person watching a CPU generation of minutes wants to see the picture early (and
cancel a bad one after the first step, not after the whole image). The full VAE's decode
costs as much as several steps, so a preview is made one of two cheap ways (PREVIEW):

- `approx` (the default): a linear map of the four latent channels to RGB, one 4x3 matrix
  per latent space, at the latents' own resolution (the output's side / 8). The factors are
  the published ones of ComfyUI (`comfy/latent_formats.py`, classes SD15 and SDXL: fitted by
  least squares between latents and their decoded images); SD 2.x shares SD 1.x's VAE and so
  its factors. Cost: one small matrix product and a JPEG of a few KB.
- `tiny`: the pipeline's tiny decoder (VAE_DECODER=tiny: TAESD / TAESDXL), fed latents
  shrunk so that the preview's side is at most 256 px, which keeps its cost a fraction of
  a step's.

Previews never touch what the pipeline goes on with: they read the latents (a copy is
made before any arithmetic), use no random generator, and so the final image's bytes are the
same with previews on or off.
"""

import base64
import io
import logging
import time
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

APPROX, TINY, OFF = "approx", "tiny", "off"
PREVIEW_METHODS = (APPROX, TINY, OFF)
# The largest side of a tiny decoder's preview, and so of the latents it is fed (/ 8).
TINY_SIDE = 256
JPEG_QUALITY = 70
MEDIA_TYPE = "image/jpeg"
# A stored preview larger than this is not kept (the shared store's bound per job); a JPEG
# of 256 px at this quality is well under it.
PREVIEW_BYTES_MAX = 256 * 1024

# ComfyUI comfy/latent_formats.py: SD15.latent_rgb_factors; SDXL.latent_rgb_factors and
# SDXL.latent_rgb_factors_bias. Rows: latent channels; columns: R, G, B; the result is in
# [-1, 1].
SD_FACTORS = (
    (0.3512, 0.2297, 0.3227),
    (0.3250, 0.4974, 0.2350),
    (-0.2829, 0.1762, 0.2721),
    (-0.2120, -0.2616, -0.7177),
)
SD_BIAS = (0.0, 0.0, 0.0)
SDXL_FACTORS = (
    (0.3651, 0.4232, 0.4341),
    (-0.2533, -0.0042, 0.1068),
    (0.1076, 0.1111, -0.0362),
    (-0.3165, -0.2492, -0.2188),
)
SDXL_BIAS = (0.1084, -0.0175, -0.0011)


@dataclass(frozen=True)
class PreviewPolicy:
    """PREVIEW, PREVIEW_EVERY and PREVIEW_SECONDS: how previews are made, after every how
    many steps, and at least how many seconds apart (a partial image asked for by an OpenAI
    stream is made at its step whatever these say, unless previews are off)."""

    method: str = APPROX
    every: int = 1
    seconds: float = 1.0

    @property
    def on(self) -> bool:
        return self.method != OFF


DEFAULT_PREVIEWS = PreviewPolicy()


@dataclass(frozen=True)
class Preview:
    """One preview of a running job: after which step, and the image."""

    step: int
    steps: int
    width: int
    height: int
    data: bytes
    media_type: str = MEDIA_TYPE
    # Which of an OpenAI stream's partial images this is (0-based); None for any other. A
    # job keeps each partial image apart from its latest preview, so a stream that reads
    # late still finds every one.
    partial: int | None = None

    def data_url(self) -> str:
        return f"data:{self.media_type};base64,{base64.b64encode(self.data).decode()}"

    def base64(self) -> str:
        return base64.b64encode(self.data).decode()


def partial_steps(partials: int, total: int) -> set[int]:
    """The steps after which the `partials` images an OpenAI stream asked for are made:
    spread evenly over the steps before the last (the last one's picture is the image
    itself); a job of fewer than partials + 1 steps has fewer distinct such steps."""
    if partials <= 0 or total <= 1:
        return set()
    found = {round(k * total / (partials + 1)) for k in range(1, partials + 1)}
    return {step for step in found if 1 <= step < total}


def is_sdxl_pipeline(pipe: Any) -> bool:
    return type(pipe).__name__.startswith("StableDiffusionXL")


def preview_image(latents: Any, *, pipe: Any, method: str) -> Any:
    """The PIL image of the first latent in the batch, made the `method` way; None when this
    pipeline cannot be previewed that way (not four latent channels, no tiny decoder)."""
    import torch
    from PIL import Image

    with torch.inference_mode():
        latent = latents[:1].detach().to("cpu", torch.float32)  # a copy: the pipeline's own
        if method == TINY:  # stays as it is, whatever follows
            rgb = _tiny(latent, pipe)
        else:
            rgb = _approx(latent, sdxl=is_sdxl_pipeline(pipe))
        if rgb is None:
            return None
        pixels = ((rgb.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
        array = pixels.permute(1, 2, 0).contiguous().numpy()
    image = Image.fromarray(array, "RGB")
    if method != TINY:  # at most the output's side / 4, whatever the VAE's scale (8 for SD)
        scale = getattr(pipe, "vae_scale_factor", 8) or 8
        height, width = (side * scale // 4 for side in latent.shape[-2:])
        if image.width > width or image.height > height:
            image = image.resize((max(1, width), max(1, height)), Image.Resampling.BILINEAR)
    return image


def _approx(latent: Any, *, sdxl: bool) -> Any:
    import torch

    if latent.shape[1] != 4:
        return None
    factors = torch.tensor(SDXL_FACTORS if sdxl else SD_FACTORS)
    bias = torch.tensor(SDXL_BIAS if sdxl else SD_BIAS)
    return torch.einsum("chw,cr->rhw", latent[0], factors) + bias[:, None, None]


def _tiny(latent: Any, pipe: Any) -> Any:
    import torch.nn.functional as F

    vae = getattr(pipe, "vae", None)
    if vae is None or type(vae).__name__ != "AutoencoderTiny":
        return None
    side = max(latent.shape[-2:])
    if side * 8 > TINY_SIDE:
        scale = TINY_SIDE / 8 / side
        size = (max(1, int(latent.shape[-2] * scale)), max(1, int(latent.shape[-1] * scale)))
        latent = F.interpolate(latent, size=size, mode="area")
    scaling = getattr(vae.config, "scaling_factor", 1.0) or 1.0
    parameter = next(vae.parameters())
    decoded = vae.decode(latent.to(parameter.device, parameter.dtype) / scaling).sample
    return decoded[0].to("cpu", latent.dtype)


def jpeg(image: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=JPEG_QUALITY)
    return buffer.getvalue()


@dataclass
class Previewer:
    """Decides after which steps a running job's preview is made, and makes it: every
    `policy.every` steps at most once per `policy.seconds`, and at each of `forced` (an
    OpenAI stream's partial images) whatever the pace."""

    pipe: Any
    policy: PreviewPolicy
    forced: set[int] = field(default_factory=set)
    _last: float | None = None
    _last_step: int = 0
    _failed: bool = False

    def due(self, step: int) -> bool:
        # A scheduler may make two timesteps of one asked step (PNDM's warm-up): one preview.
        if not self.policy.on or self._failed or step <= self._last_step:
            return False
        if step in self.forced:
            return True
        if step % max(1, self.policy.every):
            return False
        return self._last is None or time.monotonic() - self._last >= self.policy.seconds

    def make(self, latents: Any, step: int, steps: int) -> Preview | None:
        """The preview after `step`, or None (not due, or this pipeline has none). A preview
        that fails is logged once and previews stop for this job: the image matters more."""
        if latents is None or not self.due(step):
            return None
        try:
            image = preview_image(latents, pipe=self.pipe, method=self.policy.method)
        except Exception:
            log.exception("preview failed; no more previews for this job")
            self._failed = True
            return None
        if image is None:
            self._failed = True
            return None
        self._last, self._last_step = time.monotonic(), step
        data = jpeg(image)
        if len(data) > PREVIEW_BYTES_MAX:
            return None
        partial = sorted(self.forced).index(step) if step in self.forced else None
        return Preview(step=step, steps=steps, width=image.width, height=image.height,
                       data=data, partial=partial)  # fmt: skip
