"""The framing rules without a model: A1111's resize modes and the "only masked" cut-out,
and where they equal diffusers' VaeImageProcessor. Milliseconds each."""

import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from imagegen.generation.framing import Cutout, Region, only_masked_region, resize_mode, resized
from tests.support.processes import ROOT


def stripes(size: tuple[int, int]) -> Image.Image:
    """Each column its own grey: where a column went shows in the result."""
    row = np.linspace(0, 255, size[0]).astype(np.uint8)
    return Image.fromarray(np.tile(row, (size[1], 1)), "L").convert("RGB")


@pytest.mark.parametrize(("sent", "runs"), [(0, 0), (1, 1), (2, 2), (3, 0), (-1, 0), (9, 0)])
def test_resize_modes_0_1_2_run_as_sent_and_any_other_as_0(sent, runs):
    assert resize_mode(sent) == runs


def test_just_resize_stretches_the_whole_picture():
    out = np.asarray(resized(stripes((128, 64)), (64, 64), 0))
    assert out.shape == (64, 64, 3)
    assert out[0, 0, 0] < 5 and out[0, -1, 0] > 250  # both ends kept


def test_crop_and_resize_covers_the_size_and_cuts_the_overflow_evenly():
    source = stripes((128, 64))
    out = np.asarray(resized(source, (64, 64), 1))
    assert out.shape == (64, 64, 3)
    # the middle 64 of 128 columns: the ends are cut off, equally on both sides
    middle = np.asarray(source)[0, 32:96, 0].astype(int)
    assert abs(int(out[0, 0, 0]) - middle[0]) <= 3 and abs(int(out[0, -1, 0]) - middle[-1]) <= 3
    assert abs(int(out[0, 0, 0]) + int(out[0, -1, 0]) - 255) <= 4


def test_resize_and_fill_fits_the_picture_and_stretches_its_edges_over_the_bands():
    source = Image.new("RGB", (128, 64), (200, 10, 10))
    source.paste((10, 10, 200), (0, 0, 128, 1))  # the top row blue, the bottom row red
    out = np.asarray(resized(source, (64, 64), 2))
    assert out.shape == (64, 64, 3)
    # the picture 64x32 in the middle (rows 16..47); the bands above and below are its
    # first and last rows stretched: blue-ish above, red below, nothing black
    assert out[:12, :, 2].min() > 120 and out[52:, :, 0].min() > 180
    assert out.reshape(-1, 3).max(axis=1).min() > 100


def test_the_same_shape_is_left_alone_whatever_the_mode():
    source = stripes((64, 64))
    for mode in (0, 1, 2):
        assert resized(source, (64, 64), mode) is source


def square_mask(size=(256, 256), box=(100, 120, 116, 136)) -> Image.Image:
    mask = Image.new("L", size)
    mask.paste(255, box)
    return mask


def test_the_cut_out_is_the_marked_box_grown_by_reach_and_padding_at_its_own_size():
    region = only_masked_region(square_mask(), padding=8, reach=8, size=None, low=32, high=512)
    assert region == Region(padding=8, box=(84, 104, 132, 152), size=(48, 48))


def test_the_cut_outs_own_size_is_rounded_up_to_8_within_the_bounds():
    region = only_masked_region(
        square_mask(box=(100, 120, 103, 160)), padding=0, reach=0, size=None, low=16, high=512
    )
    assert region is not None and region.size == (16, 40)  # 3 -> 16 (the low bound), 40
    assert region.box[2] - region.box[0] == 16  # grown to the size's shape, 16:40
    assert region.box[3] - region.box[1] == 40


def test_a_size_sent_is_worked_and_the_box_grows_to_its_shape_within_the_picture():
    region = only_masked_region(
        square_mask(box=(0, 100, 20, 120)), padding=0, reach=0, size=(64, 32), low=16, high=512
    )
    assert region is not None and region.size == (64, 32)
    x1, y1, x2, y2 = region.box
    assert (x2 - x1) / (y2 - y1) == 2 and x1 == 0  # shifted back inside the picture
    assert (y1, y2) == (100, 120)


def test_a_mask_that_marks_nothing_has_no_cut_out():
    assert only_masked_region(Image.new("L", (64, 64)), padding=4, reach=8, size=None, low=8,
                              high=64) is None  # fmt: skip


def test_the_cut_out_goes_back_where_it_came_from_and_nothing_else_moves():
    picture = Image.fromarray(
        np.random.default_rng(1).integers(0, 256, (64, 64, 3), dtype=np.uint8), "RGB"
    )
    cutout = Cutout(Region(padding=0, box=(16, 8, 48, 40), size=(64, 64)))
    worked = cutout.cut(picture)
    assert worked.size == (64, 64)
    back = np.asarray(cutout.put_back(Image.new("RGB", (64, 64), (0, 255, 0)), picture))
    assert (back[8:40, 16:48] == (0, 255, 0)).all()
    outside = np.ones((64, 64), bool)
    outside[8:40, 16:48] = False
    assert (back[outside] == np.asarray(picture)[outside]).all()


def random_masks(count: int, seed: int = 0):
    """Masks of many shapes, each marking one random rectangle, with a padding and a size."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        width, height = (int(side) for side in rng.integers(16, 200, 2))
        marked = np.zeros((height, width), np.uint8)
        x1, x2 = sorted(int(x) for x in rng.integers(0, width, 2))
        y1, y2 = sorted(int(y) for y in rng.integers(0, height, 2))
        marked[y1 : y2 + 1, x1 : x2 + 1] = 255
        size = (int(rng.integers(8, 300)), int(rng.integers(8, 300)))
        yield Image.fromarray(marked, "L"), int(rng.integers(0, 40)), size


def test_the_cut_out_box_is_diffusers_get_crop_region():
    from diffusers.image_processor import VaeImageProcessor

    for mask, padding, size in random_masks(500):
        region = only_masked_region(mask, padding=padding, reach=0, size=size, low=8, high=4096)
        assert region is not None
        assert region.box == VaeImageProcessor.get_crop_region(mask, *size, pad=padding)


@pytest.mark.parametrize(("mode", "theirs"), [(0, "default"), (1, "crop")])
def test_resize_modes_0_and_1_are_diffusers_resize_pixel_for_pixel(mode, theirs):
    from diffusers.image_processor import VaeImageProcessor

    processor, rng = VaeImageProcessor(), np.random.default_rng(2)
    for _ in range(20):
        width, height, to_width, to_height = (int(side) for side in rng.integers(8, 120, 4))
        picture = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
        ours = resized(picture, (to_width, to_height), mode)
        assert ours.tobytes() == processor.resize(picture, to_height, to_width, theirs).tobytes()


FRAMES_A_MASK = """
import sys
from PIL import Image
from imagegen.generation.edit_inputs import picture_mask
from imagegen.generation.framing import only_masked_region
from imagegen.generation.requests import GenerationRequest
mask = Image.new("L", (96, 64))
mask.paste(255, (40, 20, 50, 30))
mask.save(sys.argv[1])
framed = picture_mask(open(sys.argv[1], "rb").read(), size=(64, 64), resize_mode=2)
region = only_masked_region(framed, padding=4, reach=8, size=None, low=8, high=64)
assert region is not None
print("torch" in sys.modules, "diffusers" in sys.modules)
"""


def test_framing_a_mask_as_the_web_process_does_imports_neither_torch_nor_diffusers(tmp_path):
    """What services.edit_request runs when it takes an edit: a web replica loads no torch."""
    run = subprocess.run(
        [sys.executable, "-c", FRAMES_A_MASK, str(tmp_path / "mask.png")],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert run.stdout.split() == ["False", "False"], run.stderr
