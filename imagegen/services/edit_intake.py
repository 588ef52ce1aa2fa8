"""An edit's intake: its inputs checked, then stored, before any job is queued."""

from django.conf import settings

from core.errors import FieldError
from imagegen.backend import Backend
from imagegen.generation import framing
from imagegen.generation.edit_inputs import (
    INPUT_PIXELS_FACTOR,
    MARKS_NOTHING,
    check_inputs,
    picture_mask,
)
from imagegen.generation.parameters import working_size
from imagegen.generation.requests import EditRequest, GenerationRequest, edit_settings


def edit_request(
    backend: Backend,
    *,
    request: GenerationRequest,
    image: bytes,
    mask: bytes | None,
    strength: float | None = None,
    mask_blur: int | None = None,
    resize_mode: int | None = None,
    only_masked: bool = False,
    only_masked_padding: int | None = None,
) -> GenerationRequest:
    """`request` made an edit of `image` (an inpainting with `mask`), its files stored.

    Every rule is checked before anything is written. The size is decided here, so the job
    shows it from the start. With `only_masked`, so is the cut-out, so the record says what
    ran."""
    asked = edit_settings(
        strength=strength, mask_blur=mask_blur, resize_mode=resize_mode,
        only_masked=only_masked, only_masked_padding=only_masked_padding,
    )  # fmt: skip
    low, high = settings.GEN_MIN_SIDE, settings.GEN_MAX_SIDE
    checked = check_inputs(image, mask, max_pixels=INPUT_PIXELS_FACTOR * high * high)
    mode, padding = asked.resize_mode, asked.only_masked_padding
    size = request.size or working_size(checked.size, low=low, high=high)
    region = None
    only_masked = padding is not None and checked.mask is not None
    if only_masked:
        size = working_size(checked.size, low=low, high=high)
    if checked.mask is not None:
        # A mark the framing cuts away or a resize blurs out marks nothing either: refused the same
        # way.
        framed = picture_mask(checked.mask, size=size, resize_mode=mode)
        if framed.getextrema()[1] == 0:
            where = f"once brought to {size[0]}x{size[1]} (resize_mode {mode})"
            raise FieldError("mask", f"{where}, {MARKS_NOTHING}")
        if only_masked:
            region = framing.only_masked_region(
                framed, padding=padding or 0, reach=2 * asked.mask_blur,
                size=request.size, low=low, high=high,
            )  # fmt: skip
    store = backend.images
    edit = EditRequest(
        source=store.save_input(checked.image),
        mask=None if checked.mask is None else store.save_input(checked.mask),
        strength=asked.strength,
        mask_blur=asked.mask_blur,
        resize_mode=mode,
        only_masked=region,
    )
    return request.model_copy(update={"edit": edit, "size": size})
