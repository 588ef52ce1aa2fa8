"""The inpainting mask's edge, and the input pasted back around it.

The VAE changes every pixel a little, so only marked pixels take the generated picture. A
pixel farther than twice `mask_blur` from every marked pixel is exactly the input's."""

from typing import Any

import numpy as np
from PIL import Image


def within(marked: np.ndarray, reach: int) -> np.ndarray:
    """Pixels within Euclidean distance `reach` of a marked one, in 2 x reach + 5 numpy passes."""
    height, width = marked.shape
    columns = np.arange(width)
    far = width + reach + 1  # farther than any reach: no marked pixel in the row
    left = np.maximum.accumulate(np.where(marked, columns, -far), axis=1)
    right = np.minimum.accumulate(np.where(marked, columns, width + far)[:, ::-1], axis=1)[:, ::-1]
    across = np.minimum(columns - left, right - columns).astype(np.int64) ** 2
    near = np.zeros_like(marked)
    for dy in range(-reach, reach + 1):
        rows = slice(max(0, dy), height + min(0, dy))  # the rows a row dy away looks at
        into = slice(max(0, -dy), height - max(0, dy))
        near[into] |= across[rows] + dy * dy <= reach * reach
    return near


def blurred_mask(mask: Any, blur: int) -> Any:
    """The mask blurred by `blur` pixels (a Gaussian, as A1111), and zero beyond twice that."""
    if blur == 0:
        return mask
    from diffusers.image_processor import VaeImageProcessor  # imports torch: a job's import

    marked = np.asarray(mask) > 0
    soft = np.asarray(VaeImageProcessor.blur(mask, blur))
    return Image.fromarray(np.where(within(marked, 2 * blur), soft, 0).astype(np.uint8), "L")


def pasted_back(generated: Any, original: Any, mask: Any) -> Any:
    """Generated where `mask` is white, original where black, blended between.

    PIL composites in integers, so a black pixel is exactly the original's."""
    return Image.composite(generated.convert("RGB"), original, mask)
