"""A1111's resize modes worked out by hand, for the tests that run them through the
pipeline (the code under test is not its own judge)."""

import numpy as np
from PIL import Image


def framed_by_hand(source: Image.Image, mode: int) -> np.ndarray | None:
    """What 128x64 noise framed to 64x64 must be, worked out without the code under test:
    None where only the band rule is checked (mode 2, by the caller)."""
    if mode == 1:  # cover: the height fits as it is, the middle 64 columns stay
        return np.asarray(source)[:, 32:96]
    if mode == 2:
        return None
    return np.asarray(source.resize((64, 64), Image.Resampling.LANCZOS))


# A mask marking the middle of the 128x64 source, the one pixel (64, 32): framed by every
# mode it lands in the middle of the 64x64 answer, away from the edge rows the fill
# stretches; with mask_blur 0 what it repaints stays inside KEEP_CLEAR of the answer.
MARK = (64, 32)
KEEP_CLEAR = (slice(24, 41), slice(24, 41))


def middle_mark() -> Image.Image:
    mask = Image.new("L", (128, 64))
    mask.putpixel(MARK, 255)
    return mask


def check_framed(out: np.ndarray, source: Image.Image, mode: int) -> None:
    """Every pixel of the answer outside KEEP_CLEAR is the framed input's, exactly."""
    kept = np.ones((64, 64), bool)
    kept[KEEP_CLEAR] = False
    expected = framed_by_hand(source, mode)
    if expected is not None:
        assert (out[kept] == expected[kept]).all()
        return
    # fit: the picture at 64x32 in rows 16..47, each band its edge row stretched (every row
    # of a band the same)
    picture = np.asarray(source.resize((64, 32), Image.Resampling.LANCZOS))
    assert (out[16:48][kept[16:48]] == picture[kept[16:48]]).all()
    assert (out[:16] == out[0]).all() and (out[48:] == out[63]).all()
    assert out[:16].std() > 0  # a row of the picture's colours, not a flat fill
