"""An edit's rules without a model: the steps a strength runs, the working size, the mask's
reach, the checks on an uploaded file, an edit's defaults and bounds. Milliseconds each."""

import io
import itertools

import numpy as np
import pytest
from PIL import Image

from core.errors import FieldError
from imagegen.generation import edit_inputs as edits
from imagegen.generation.edit_inputs import check_inputs, pipeline_strength
from imagegen.generation.masks import blurred_mask, pasted_back, within
from imagegen.generation.parameters import steps_run, working_size
from imagegen.generation.requests import (
    MASK_BLUR_DEFAULT,
    ONLY_MASKED_PADDING_DEFAULT,
    STRENGTH_DEFAULT,
    EditSettings,
    edit_settings,
)


@pytest.mark.parametrize(
    ("steps", "strength", "run"),
    [(20, 0.75, 15), (4, 0.5, 2), (2, 0.1, 1), (1, 1.0, 1), (20, 1.0, 20), (100, 0.29, 28),
     (10, 0.7, 7), (3, 0.34, 1), (50, 0.01, 1)],
)  # fmt: skip
def test_an_edit_runs_max_1_int_steps_times_strength(steps, strength, run):
    assert steps_run(steps, strength) == run


@pytest.mark.parametrize("steps", range(1, 151))
def test_diffusers_runs_exactly_the_steps_of_the_rule_for_every_strength(steps):
    """diffusers runs int(steps x s) of what it is handed (its get_timesteps), at least 1
    wanted; the float handed over must never round one short."""
    for hundredths in range(1, 101):
        strength = hundredths / 100
        handed = pipeline_strength(steps, strength)
        assert 0 < handed <= 1
        assert min(int(steps * handed), steps) == steps_run(steps, strength)
        assert (handed == 1.0) == (steps_run(steps, strength) == steps)


@pytest.mark.parametrize(
    ("size", "working"),
    [((64, 64), (64, 64)), ((100, 75), (96, 72)), ((30, 30), (64, 64)),
     ((5000, 1030), (2048, 1024))],
)  # fmt: skip
def test_the_working_size_rounds_each_side_down_to_8_within_the_bounds(size, working):
    assert working_size(size, low=64, high=2048) == working


def brute_within(marked: np.ndarray, reach: int) -> np.ndarray:
    ys, xs = np.nonzero(marked)
    grid_y, grid_x = np.indices(marked.shape)
    if len(ys) == 0:
        return np.zeros(marked.shape, bool)
    distances = (grid_y[..., None] - ys) ** 2 + (grid_x[..., None] - xs) ** 2
    return distances.min(axis=-1) <= reach * reach


@pytest.mark.parametrize(("seed", "reach"), list(itertools.product(range(6), (0, 1, 3, 8))))
def test_the_reach_of_the_marked_pixels_is_the_euclidean_distance(seed, reach):
    marked = np.random.default_rng(seed).random((23, 31)) > 0.97
    assert (within(marked, reach) == brute_within(marked, reach)).all()


def test_the_blurred_mask_is_zero_beyond_twice_the_blur_and_soft_at_the_edge():
    mask = Image.new("L", (64, 64))
    mask.paste(255, (30, 30, 34, 34))
    blurred = np.asarray(blurred_mask(mask, 4))
    reach = brute_within(np.asarray(mask) > 0, 8)
    assert (blurred[~reach] == 0).all()
    assert blurred[reach].max() > 0 and 0 < blurred[32, 38] < 255  # the edge is soft


def png(size: tuple[int, int], mode: str = "RGB") -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, size).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("image", "mask", "field", "rule"),
    [
        (b"not an image", None, "image", "must be a PNG, JPEG or WebP image"),
        (png((64, 64))[:60], None, "image", "must be a PNG, JPEG or WebP image"),
        (png((64, 64)), b"GIF89a", "mask", "must be a PNG, JPEG or WebP image"),
        (png((64, 64)), png((64, 72), "L"), "mask", "must be the image's size, 64x64; got 64x72"),
        (png((300, 300)), None, "image", "declares 300x300 pixels, past the bound of 80000"),
    ],
)
def test_a_bad_upload_is_refused_naming_the_field_and_rule(image, mask, field, rule):
    with pytest.raises(FieldError) as refused:
        check_inputs(image, mask, max_pixels=80_000)
    assert refused.value.field == field and rule in refused.value.rule


def test_the_paste_back_blends_where_the_mask_is_grey_and_keeps_where_it_is_black():
    generated, original = Image.new("RGB", (4, 1), "white"), Image.new("RGB", (4, 1), "black")
    mask = Image.frombytes("L", (4, 1), bytes([0, 64, 128, 255]))
    assert list(np.asarray(pasted_back(generated, original, mask))[0, :, 0]) == [0, 64, 128, 255]


def saved(image_format: str, mode: str = "RGB") -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, (64, 64), "white").save(buffer, format=image_format)
    return buffer.getvalue()


@pytest.mark.parametrize("image_format", ["PNG", "JPEG", "WEBP"])
def test_png_jpeg_and_webp_are_read(image_format):
    assert check_inputs(saved(image_format), None, max_pixels=80_000).size == (64, 64)


@pytest.mark.parametrize("image_format", ["GIF", "BMP", "TIFF", "ICO", "PPM"])
def test_every_other_format_is_refused_naming_the_field(image_format):
    with pytest.raises(FieldError) as refused:
        check_inputs(png((64, 64)), saved(image_format, "L"), max_pixels=80_000)
    assert refused.value.field == "mask"
    assert refused.value.rule.startswith("must be a PNG, JPEG or WebP image")


def test_at_most_decodes_at_once_decode_and_the_next_waits_then_is_refused(monkeypatch):
    monkeypatch.setattr(edits, "DECODE_WAIT", 0.2)
    taken = [edits._decodes.acquire(timeout=5) for _ in range(edits.DECODES_AT_ONCE)]
    assert all(taken)
    try:
        with pytest.raises(edits.DecodesBusy) as busy:
            edits.read_image(png((64, 64)), field="image", max_pixels=80_000)
        assert busy.value.status == 503 and busy.value.retry_after == 5
    finally:
        for _ in taken:
            edits._decodes.release()
    assert edits.read_image(png((64, 64)), field="image", max_pixels=80_000).size == (64, 64)


def test_an_edit_sent_without_settings_takes_every_default():
    assert edit_settings() == EditSettings(
        strength=STRENGTH_DEFAULT, mask_blur=MASK_BLUR_DEFAULT, resize_mode=0,
        only_masked_padding=None,
    )  # fmt: skip
    assert edit_settings(only_masked=True).only_masked_padding == ONLY_MASKED_PADDING_DEFAULT


def test_an_edits_settings_sent_are_kept_and_resize_modes_run_as_framing_says():
    sent = edit_settings(
        strength=0.3, mask_blur=0, resize_mode=2, only_masked=True, only_masked_padding=0
    )
    assert sent == EditSettings(strength=0.3, mask_blur=0, resize_mode=2, only_masked_padding=0)
    assert edit_settings(resize_mode=3).resize_mode == 0  # A1111's latent upscale: just resize
    assert edit_settings(only_masked_padding=8).only_masked_padding is None  # not only masked


@pytest.mark.parametrize(
    ("sent", "field", "rule"),
    [
        ({"strength": 0.0}, "strength", "must be greater than 0 and at most 1, got 0"),
        ({"strength": 1.5}, "strength", "got 1.5"),
        ({"mask_blur": -1}, "mask_blur", "must be between 0 and 64 pixels, got -1"),
        ({"mask_blur": 65}, "mask_blur", "got 65"),
        ({"only_masked": True, "only_masked_padding": 257}, "only_masked_padding",
         "must be between 0 and 256 pixels, got 257"),
    ],
)  # fmt: skip
def test_an_edit_setting_out_of_bounds_is_refused_naming_the_field_and_rule(sent, field, rule):
    with pytest.raises(FieldError) as refused:
        edit_settings(**sent)
    assert refused.value.field == field and rule in refused.value.rule
