"""An edit's intake: its inputs checked, then stored, before any job is queued."""

from django.conf import settings

from config.errors import FieldError
from imagegen.backend import Backend
from imagegen.generation import framing
from imagegen.generation.edits import (
    INPUT_PIXELS_FACTOR,
    MARKS_NOTHING,
    EditRequest,
    check_inputs,
    check_mask_blur,
    check_only_masked_padding,
    check_strength,
    picture_mask,
    working_size,
)
from imagegen.generation.framing import JUST_RESIZE
from imagegen.generation.render import GenerationRequest


def edit_request(
    backend: Backend,
    *,
    request: GenerationRequest,
    image: bytes,
    mask: bytes | None,
    strength: float,
    mask_blur: int,
    resize_mode: int = JUST_RESIZE,
    only_masked_padding: int | None = None,
) -> GenerationRequest:
    """`request` made an edit of `image` (with `mask`, an inpainting): every rule checked
    first (a FieldError naming the field otherwise, with nothing written), then both files
    stored (the image store, on the share in distributed mode: the job's request names them
    by sha256). Its size is the one sent, else the input's as the model takes it
    (imagegen.generation.edits.working_size), so the job shows it from the start; the input
    is brought to it by `resize_mode` (any value but 1 and 2 as 0).

    `only_masked_padding` not None: "only masked" with that padding. The answer is then the
    input's size as the model takes it, and a size sent is the one the cut-out is worked at
    (A1111's inpaint_full_res); the cut-out is decided here, from the mask, so the record
    says what ran from the start. Without a mask it changes nothing."""
    check_strength(strength)
    check_mask_blur(mask_blur)
    low, high = settings.GEN_MIN_SIDE, settings.GEN_MAX_SIDE
    checked = check_inputs(image, mask, max_pixels=INPUT_PIXELS_FACTOR * high * high)
    mode = framing.resize_mode(resize_mode)
    size = request.size or working_size(checked.size, low=low, high=high)
    region = None
    only_masked = only_masked_padding is not None and checked.mask is not None
    if only_masked:
        check_only_masked_padding(only_masked_padding or 0)
        size = working_size(checked.size, low=low, high=high)
    if checked.mask is not None:
        # A mark that the framing cuts away (resize_mode 1) or a resize blurs to nothing
        # marks nothing either: refused as the mask as sent would be (check_inputs).
        framed = picture_mask(checked.mask, size=size, resize_mode=mode)
        if framed.getextrema()[1] == 0:
            where = f"once brought to {size[0]}x{size[1]} (resize_mode {mode})"
            raise FieldError("mask", f"{where}, {MARKS_NOTHING}")
        if only_masked:
            region = framing.only_masked_region(
                framed, padding=only_masked_padding or 0, reach=2 * mask_blur,
                size=request.size, low=low, high=high,
            )  # fmt: skip
    store = backend.images
    edit = EditRequest(
        source=store.save_input(checked.image),
        mask=None if checked.mask is None else store.save_input(checked.mask),
        strength=strength,
        mask_blur=mask_blur,
        resize_mode=mode,
        only_masked=region,
    )
    return request.model_copy(update={"edit": edit, "size": size})
