"""Where an edit's picture is worked: A1111's resize modes and "only masked", as A1111 writes
them.

Not diffusers' VaeImageProcessor: it imports torch, which a web replica never loads. Where
both do the same, the pixels are equal (tests/imagegen/generation/test_framing.py)."""

from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image
from pydantic import BaseModel, ConfigDict, Field

JUST_RESIZE, CROP_AND_RESIZE, RESIZE_AND_FILL = 0, 1, 2
_LANCZOS = Image.Resampling.LANCZOS


def resize_mode(value: int) -> int:
    """1 and 2 as sent; anything else (A1111's latent upscale, unknown values) as 0."""
    return value if value in (CROP_AND_RESIZE, RESIZE_AND_FILL) else JUST_RESIZE


def resized(image: Image.Image, size: tuple[int, int], mode: int) -> Image.Image:
    """A1111's resize_mode, Lanczos throughout: 0 stretches, 1 crops to cover, 2 fits and fills."""
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
    """Each empty band is the picture's edge row (or column) stretched over it, as A1111 does."""
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
    """An "only masked" cut-out: `box` (right and bottom exclusive), worked at `size`."""

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
    """The cut-out for `mask`, or None when it marks nothing.

    The marked box grown by `reach` and `padding`, then to the working size's shape (A1111's
    expand_crop_region)."""
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
    """Grows `box` evenly along one axis to `size`'s shape, kept inside the picture."""
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
    """A Region applied: what the pipeline gets, and its answer put back."""

    region: Region

    def cut(self, picture: Any) -> Any:
        """The box at the working size (A1111's resize and fill)."""
        return resized(picture.crop(self.region.box), self.region.size, RESIZE_AND_FILL)

    def put_back(self, worked: Any, picture: Any) -> Any:
        """A copy of `picture` with `worked` resized to the box (crop and resize) and pasted over
        it."""
        x1, y1, x2, y2 = self.region.box
        whole = picture.copy()
        whole.paste(resized(worked.convert(picture.mode), (x2 - x1, y2 - y1), CROP_AND_RESIZE),
                    (x1, y1))  # fmt: skip
        return whole
