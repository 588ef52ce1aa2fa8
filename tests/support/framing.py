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


def check_framed(out: np.ndarray, source: Image.Image, mode: int) -> None:
    expected = framed_by_hand(source, mode)
    if expected is not None:
        assert (out == expected).all()
        return
    # fit: the picture at 64x32 in rows 16..47, each band its edge row stretched (every row
    # of a band the same)
    assert (out[16:48] == np.asarray(source.resize((64, 32), Image.Resampling.LANCZOS))).all()
    assert (out[:16] == out[0]).all() and (out[48:] == out[63]).all()
    assert out[:16].std() > 0  # a row of the picture's colours, not a flat fill
