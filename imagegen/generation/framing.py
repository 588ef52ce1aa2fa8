"""Where an edit's picture is worked: A1111's resize modes (an input brought to a size of
another shape) and "only masked" (the marked area cut out, worked at a size of its own and
pasted back).

Why a module of its own: both are geometry that every surface shares (POST /generate's form,
A1111's img2img), written once as A1111 writes it (modules/images.py resize_image,
modules/masking.py) so that a client of A1111 gets the picture it expects. On a CPU "only
masked" is what makes a small fix cheap: the UNet works the cut-out's pixels, not the whole
picture's.

Why not diffusers' VaeImageProcessor, which ports the same A1111 code: the web process frames
the mask when it takes the request (services.edit_request), and diffusers' image processor
imports torch, which a web replica never loads (docs/azure.md). Its resize "default" and
"crop" give the same pixels as modes 0 and 1 here, and its get_crop_region the same box as
only_masked_region (tests/imagegen/generation/test_framing.py holds both); its "fill" stretches the
bands with Pillow's default bicubic, not Lanczos, and differs there (up to 30 levels).
"""

from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image
from pydantic import BaseModel, ConfigDict, Field

JUST_RESIZE, CROP_AND_RESIZE, RESIZE_AND_FILL = 0, 1, 2
_LANCZOS = Image.Resampling.LANCZOS


def resize_mode(value: int) -> int:
    """A1111's resize_mode as it runs here: 1 and 2 as sent, any other value (A1111's 3,
    "just resize (latent upscale)", or one it does not have) as 0."""
    return value if value in (CROP_AND_RESIZE, RESIZE_AND_FILL) else JUST_RESIZE


def resized(image: Image.Image, size: tuple[int, int], mode: int) -> Image.Image:
    """`image` at `size` by A1111's resize_mode (Lanczos throughout):
    0 just resize: stretched to `size`;
    1 crop and resize: scaled to cover `size`, its overflow cut off evenly on both sides;
    2 resize and fill: scaled to fit inside `size`, centred, the bands left over filled by
    stretching its edge rows (or columns) outwards."""
    width, height = size
    if image.size == size:
        return image
    if mode == JUST_RESIZE:
        return image.resize(size, _LANCZOS)
    ratio, src_ratio = width / height, image.width / image.height
    if mode == CROP_AND_RESIZE:
        src_w = width if ratio > src_ratio else image.width * height // image.height
        src_h = height if ratio <= src_ratio else image.height * width // image.width
    else:
        src_w = width if ratio < src_ratio else image.width * height // image.height
        src_h = height if ratio >= src_ratio else image.height * width // image.width
    scaled = image.resize((src_w, src_h), _LANCZOS)
    framed = Image.new(image.mode, size)
    framed.paste(scaled, (width // 2 - src_w // 2, height // 2 - src_h // 2))
    if mode == RESIZE_AND_FILL:
        _fill_bands(framed, scaled, ratio, src_ratio)
    return framed


def _fill_bands(framed: Image.Image, scaled: Image.Image, ratio: float, src_ratio: float) -> None:
    """A1111's fill: the empty band above and below (or left and right) of the scaled
    picture is its first and last row (column) stretched over the band."""
    width, height = framed.size
    if ratio < src_ratio:
        band = height // 2 - scaled.height // 2
        if band > 0:
            top = scaled.resize((width, band), _LANCZOS, box=(0, 0, width, 0))
            bottom = scaled.resize(
                (width, band), _LANCZOS, box=(0, scaled.height, width, scaled.height)
            )
            framed.paste(top, (0, 0))
            framed.paste(bottom, (0, band + scaled.height))
    elif ratio > src_ratio:
        band = width // 2 - scaled.width // 2
        if band > 0:
            left = scaled.resize((band, height), _LANCZOS, box=(0, 0, 0, height))
            right = scaled.resize(
                (band, height), _LANCZOS, box=(scaled.width, 0, scaled.width, height)
            )
            framed.paste(left, (0, 0))
            framed.paste(right, (band + scaled.width, 0))


class Region(BaseModel):
    """An "only masked" edit's cut-out: `box` (left, top, right, bottom; right and bottom
    exclusive) of the picture, worked at `size`."""

    model_config = ConfigDict(frozen=True)

    padding: int = Field(description="pixels added around the marked area's bounding box")
    box: tuple[int, int, int, int]
    size: tuple[int, int] = Field(description="the size the cut-out is worked at")


def only_masked_region(
    mask: Image.Image,
    *,
    padding: int,
    reach: int,
    size: tuple[int, int] | None,
    low: int,
    high: int,
) -> Region | None:
    """The cut-out of an "only masked" edit of `mask` (at the picture's size), None when it
    marks nothing. The rule: the marked (non-black) pixels' bounding box, grown by `reach`
    (how far the blurred edge reaches: twice mask_blur) and `padding` on every side, within
    the picture; worked at `size` when one was sent (A1111's width and height), else at the
    box's own size with each side rounded up to a multiple of 8 and kept within
    `low`..`high`; then the box grown to that size's shape (A1111's expand_crop_region)."""
    marked = np.argwhere(np.asarray(mask.convert("L")) > 0)
    if marked.size == 0:
        return None
    (top, left), (bottom, right) = marked.min(axis=0), marked.max(axis=0) + 1
    grow = reach + padding
    box = (
        max(0, int(left) - grow),
        max(0, int(top) - grow),
        min(mask.width, int(right) + grow),
        min(mask.height, int(bottom) + grow),
    )
    if size is None:
        size = (_up_to_8(box[2] - box[0], low, high), _up_to_8(box[3] - box[1], low, high))
    return Region(padding=padding, box=_to_shape(box, size, mask.size), size=size)


def _up_to_8(side: int, low: int, high: int) -> int:
    return min(high, max(low, -(-side // 8) * 8))


def _to_shape(
    box: tuple[int, int, int, int], size: tuple[int, int], picture: tuple[int, int]
) -> tuple[int, int, int, int]:
    """`box` grown along one axis to `size`'s width:height (A1111's expand_crop_region):
    evenly on both sides, shifted back inside the picture, and cut at its edge."""
    x1, y1, x2, y2 = box
    if (x2 - x1) / (y2 - y1) > size[0] / size[1]:
        y1, y2 = _grow(y1, y2, int((x2 - x1) * size[1] / size[0]) - (y2 - y1), picture[1])
    else:
        x1, x2 = _grow(x1, x2, int((y2 - y1) * size[0] / size[1]) - (x2 - x1), picture[0])
    return x1, y1, x2, y2


def _grow(start: int, end: int, more: int, limit: int) -> tuple[int, int]:
    start, end = start - more // 2, end + more - more // 2
    if end > limit:
        start, end = start - (end - limit), limit
    if start < 0:
        start, end = 0, min(limit, end - start)
    return start, end


@dataclass(frozen=True)
class Cutout:
    """A Region applied: what the pipeline is handed, and its answer put back in place."""

    region: Region

    def cut(self, picture: Any) -> Any:
        """The box of `picture` at the working size (A1111: resize and fill)."""
        return resized(picture.crop(self.region.box), self.region.size, RESIZE_AND_FILL)

    def put_back(self, worked: Any, picture: Any) -> Any:
        """A copy of `picture` with `worked` brought back to the box's size (A1111: crop and
        resize) and pasted over the box."""
        x1, y1, x2, y2 = self.region.box
        whole = picture.copy()
        whole.paste(resized(worked.convert(picture.mode), (x2 - x1, y2 - y1), CROP_AND_RESIZE),
                    (x1, y1))  # fmt: skip
        return whole
