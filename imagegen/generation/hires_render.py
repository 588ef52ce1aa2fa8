"""The hires fix's upscale and second pass, run inside render's one session of the pipeline
(its LoRAs, stop points and prompt cache already on), so the three phases are one job.

The second pass is the img2img pipeline made of the loaded one's components (no weight is
copied). A latent mode resizes the first pass's latents and hands them to it as they are; an
upscaler gets the decoded picture and its result is encoded again."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from imagegen.generation.hires import LATENT_MODES, Hires, second_pass_schedule
from imagegen.generation.images import GenerationParameters
from imagegen.generation.prompt_tags import without_tags
from imagegen.generation.schedulers import scheduler_applied
from imagegen.model import prompt_cache
from imagegen.model.edit_pipelines import edit_pipeline

if TYPE_CHECKING:
    from imagegen.model.upscalers.offered import OfferedUpscalers


@dataclass(frozen=True)
class HiresRun:
    """A job's hires fix: its settings (steps resolved), the offered upscalers whose loaded
    networks POST /upscale's jobs share (None: a filter or a latent mode only), where its phases
    are told, and its upscaler's tile budget (imagegen.generation.upscale's rule)."""

    hires: Hires
    upscalers: "OfferedUpscalers | None"
    phase: Callable[[str], None]
    tile_budget_bytes: int

    @property
    def first_pass_output(self) -> dict[str, str]:
        """A latent mode keeps the first pass's latents: no decode."""
        return {"output_type": "latent"} if self.hires.latent else {}

    def finish(
        self,
        pipe: Any,
        first: Any,
        *,
        parameters: GenerationParameters,
        scheduler: str | None,
        generator: Any,
        check: Callable[[], None],
        step_end: Callable[..., dict],
    ) -> Any:
        """The first pass's output (latents or a picture) upscaled and worked again: the image."""
        self.phase("upscaling")
        check()
        picture = self._upscaled(pipe, first, check)
        check()
        self.phase("second pass")
        hires = self.hires
        runs = edit_pipeline(pipe, inpaint=False)
        with scheduler_applied(runs, scheduler), prompt_cache.used(pipe, runs):
            return runs(
                prompt=without_tags(parameters.prompt if hires.prompt is None else hires.prompt),
                negative_prompt=parameters.negative_prompt
                if hires.negative_prompt is None
                else hires.negative_prompt,
                num_inference_steps=second_pass_schedule(hires.steps, hires.denoising_strength),
                strength=hires.denoising_strength,
                guidance_scale=parameters.guidance,
                image=picture,
                generator=generator,
                callback_on_step_end=step_end,
            ).images[0]

    def _upscaled(self, pipe: Any, first: Any, check: Callable[[], None]) -> Any:
        width, height = self.hires.size
        if self.hires.latent:
            from torch.nn.functional import interpolate

            mode, antialias = LATENT_MODES[self.hires.upscaler]
            latents = first if first.ndim == 4 else first[None]
            factor = pipe.vae_scale_factor
            return interpolate(
                latents, size=(height // factor, width // factor), mode=mode, antialias=antialias
            )
        from PIL import Image

        upscaler = self._upscaler()
        image = upscaler.upscale(
            first, scale=width / first.width, budget_bytes=self.tile_budget_bytes, check=check
        )
        return image if image.size == (width, height) else image.resize(
            (width, height), Image.Resampling.LANCZOS
        )  # fmt: skip

    def _upscaler(self) -> Any:
        from imagegen.model.upscalers.upscaler import LANCZOS, NEAREST

        for kind in (LANCZOS, NEAREST):
            if kind.name == self.hires.upscaler:
                return kind
        if self.upscalers is None:
            raise ValueError(
                f"the upscaler {self.hires.upscaler} is not offered here (this process's UPSCALERS)"
            )
        return self.upscalers.find(self.hires.upscaler, field_name="hires_upscaler")
