"""Live previews: the picture as it forms, made cheaply from the latents after a step.

A person watching a minutes-long generation wants to cancel a bad one early. Previews read a
copy of the latents and draw no random numbers, so they never change the image."""

import base64
import io
import logging
import time
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

APPROX, TINY, OFF = "approx", "tiny", "off"
PREVIEW_METHODS = (APPROX, TINY, OFF)
# The largest side of a tiny decoder's preview; its latents are this / 8.
TINY_SIDE = 256
JPEG_QUALITY = 70
MEDIA_TYPE = "image/jpeg"
# A larger stored preview is dropped (the shared store's bound per job). A 256 px JPEG is far below.
PREVIEW_BYTES_MAX = 256 * 1024

# ComfyUI comfy/latent_formats.py (SD15, SDXL). Rows: latent channels; columns: R, G, B; result in
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
    """PREVIEW, PREVIEW_EVERY and PREVIEW_SECONDS.

    An OpenAI stream's partial images are made at their steps whatever these say, unless previews
    are off."""

    method: str = APPROX
    every: int = 1
    seconds: float = 1.0

    @property
    def on(self) -> bool:
        return self.method != OFF


DEFAULT_PREVIEWS = PreviewPolicy()


@dataclass(frozen=True)
class Preview:
    """One preview of a running job, after `step`."""

    step: int
    steps: int
    width: int
    height: int
    data: bytes
    media_type: str = MEDIA_TYPE
    # Which partial image of an OpenAI stream this is (0-based), else None. Each is kept apart from
    # the latest preview, so a late stream still finds every one.
    partial: int | None = None

    def data_url(self) -> str:
        return f"data:{self.media_type};base64,{base64.b64encode(self.data).decode()}"

    def base64(self) -> str:
        return base64.b64encode(self.data).decode()


def partial_steps(partials: int, total: int) -> set[int]:
    """Spread evenly before the last step, whose picture is the image itself."""
    if partials <= 0 or total <= 1:
        return set()
    found = {round(k * total / (partials + 1)) for k in range(1, partials + 1)}
    return {step for step in found if 1 <= step < total}


def is_sdxl_pipeline(pipe: Any) -> bool:
    return type(pipe).__name__.startswith("StableDiffusionXL")


def preview_image(latents: Any, *, pipe: Any, method: str) -> Any:
    """The first latent's image, or None when this pipeline cannot preview that way."""
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
    """Every `policy.every` steps at most once per `policy.seconds`, and at each of `forced`."""

    pipe: Any
    policy: PreviewPolicy
    forced: set[int] = field(default_factory=set)
    _last: float | None = None
    _last_step: int = 0
    _failed: bool = False

    def due(self, step: int) -> bool:
        # PNDM's warm-up makes two timesteps of one step: one preview.
        if not self.policy.on or self._failed or step <= self._last_step:
            return False
        if step in self.forced:
            return True
        if step % max(1, self.policy.every):
            return False
        return self._last is None or time.monotonic() - self._last >= self.policy.seconds

    def make(self, latents: Any, step: int, steps: int) -> Preview | None:
        """The preview after `step`, or None.

        A failure is logged once and stops previews for this job: the image matters more."""
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
