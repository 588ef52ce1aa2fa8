"""The img2img and inpainting pipelines of the loaded one, made of its very components.

Why: a second pipeline loaded from the share would hold a second copy of every weight (12.9
GiB for SDXL in fp32). diffusers' `from_pipe` builds the other task's pipeline around the
same modules (the UNet, the VAE, the text encoders, the scheduler), so an edit costs no
memory beyond its activations, and everything set on those modules at load (fused LoRA,
attention slicing, VAE tiling, the tiny decoder, the stop points' hooks) holds for it too.
The standard inpainting pipelines take the base model's 4-channel UNet (they blend the
input's latents back in at each step).

Each is built once per loaded pipeline and kept on it, like its stop points.
"""

from typing import Any

_KEPT = "_imagegen_edit_pipelines"  # the loaded pipeline's attribute holding them


def edit_pipeline(pipe: Any, *, inpaint: bool) -> Any:
    """The inpainting (`inpaint`) or img2img pipeline sharing `pipe`'s components."""
    kept: dict[bool, Any] = getattr(pipe, _KEPT, None) or {}
    if inpaint not in kept:
        from diffusers import AutoPipelineForImage2Image, AutoPipelineForInpainting

        auto = AutoPipelineForInpainting if inpaint else AutoPipelineForImage2Image
        built = auto.from_pipe(pipe)
        built.set_progress_bar_config(disable=True)
        kept[inpaint] = built
        setattr(pipe, _KEPT, kept)
    return kept[inpaint]


def set_unet(pipe: Any, unet: Any) -> None:
    """Makes `unet` the UNet of `pipe` and of every edit pipeline built from it, which then
    hold no other (imagegen.model.unets swaps the base's and the inpainting checkpoint's;
    None drops the resident one everywhere before the other is loaded)."""
    pipe.unet = unet
    for built in (getattr(pipe, _KEPT, None) or {}).values():
        built.unet = unet
