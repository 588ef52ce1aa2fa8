"""The img2img and inpainting pipelines of the loaded one, made of its very components.

A second pipeline from the share would copy every weight: 12.9 GiB for SDXL in fp32.
diffusers' `from_pipe` reuses the modules, so an edit costs only its activations. All
load-time settings hold for it too. Each is built once per loaded pipeline."""

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
    """Makes `unet` the UNet of `pipe` and of every edit pipeline built from it.

    None drops the resident one everywhere before another loads (imagegen.model.unets)."""
    pipe.unet = unet
    for built in (getattr(pipe, _KEPT, None) or {}).values():
        built.unet = unet
