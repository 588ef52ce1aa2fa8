"""Every upscaler answers one call, a PIL image in and the upscaled image out, at the scale
asked whatever a network's own (A1111's rule): a 4x network asked for 2x runs at 4x and is
resized to 2x with Lanczos; asked for 8x it runs twice."""

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from imagegen.model.upscalers.tiles import run_one_pass
from imagegen.model.upscalers.upscaler import (
    LANCZOS,
    NEAREST,
    ModelUpscaler,
    Upscaler,
    load_model_upscaler,
)
from tests.support.tiny_upscaler import X1, X4, tiny_net, write_weights

BUDGET = 64 * 2**20  # bytes: ample for the tiny networks' tiles


def picture(width: int, height: int) -> Image.Image:
    rng = np.random.default_rng(11)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def test_a_4x_network_asked_for_2x_runs_at_4x_and_is_resized_with_lanczos():
    net = tiny_net(X4)
    image = picture(20, 14)
    done: list[tuple[int, int]] = []
    result = ModelUpscaler("tiny", net).upscale(
        image, scale=2, budget_bytes=BUDGET, progress=lambda *p: done.append(p)
    )
    at_4x = Image.fromarray(run_one_pass(net, np.asarray(image)))
    assert result.size == (40, 28) and result.mode == "RGB"
    assert np.array_equal(
        np.asarray(result), np.asarray(at_4x.resize((40, 28), Image.Resampling.LANCZOS))
    )
    assert done == [(1, 1)]


def test_a_network_asked_for_its_own_scale_is_not_resized():
    net = tiny_net(X4)
    image = picture(20, 14)
    result = ModelUpscaler("tiny", net).upscale(image, scale=4, budget_bytes=BUDGET)
    assert np.array_equal(np.asarray(result), run_one_pass(net, np.asarray(image)))


def test_asked_for_more_than_its_scale_a_network_runs_again_on_its_output():
    net = tiny_net(X4)
    image = picture(6, 5)
    done: list[tuple[int, int]] = []
    result = ModelUpscaler("tiny", net, margin=0).upscale(
        image, scale=8, budget_bytes=BUDGET, progress=lambda *p: done.append(p)
    )
    twice = Image.fromarray(run_one_pass(net, run_one_pass(net, np.asarray(image))))
    assert result.size == (48, 40)
    assert np.array_equal(
        np.asarray(result), np.asarray(twice.resize((48, 40), Image.Resampling.LANCZOS))
    )
    assert done == [(1, 2), (2, 2)]  # each pass fits one tile; progress spans both


def test_the_passes_stop_at_three_and_a_1x_network_runs_once():
    upscaler = ModelUpscaler("tiny", tiny_net(X4))
    assert upscaler.passes((10, 10), (640, 640)) == [(10, 10), (40, 40), (160, 160)]
    assert upscaler.passes((10, 10), (40, 40)) == [(10, 10)]
    restorer = ModelUpscaler("restore", tiny_net(X1))
    assert restorer.scale == 1 and restorer.passes((16, 16), (32, 32)) == [(16, 16)]
    assert restorer.upscale(picture(16, 16), scale=2, budget_bytes=BUDGET).size == (32, 32)


def test_tiles_sized_to_a_small_budget_report_each_tile():
    """A budget for about one 64-pixel square with its margins cuts a 96x80 picture."""
    upscaler = ModelUpscaler("tiny", tiny_net(X4), margin=8)
    done: list[tuple[int, int]] = []
    budget = 4 * (4 * 8 * 16 + 4 * 24) * 80**2
    upscaler.upscale(
        picture(96, 80), scale=4, budget_bytes=budget, progress=lambda *p: done.append(p)
    )
    assert done == [(n, 4) for n in range(1, 5)]  # 64-pixel tiles: 2 across, 2 down


@pytest.mark.parametrize(
    ("upscaler", "resample"),
    [(LANCZOS, Image.Resampling.LANCZOS), (NEAREST, Image.Resampling.NEAREST)],
)
def test_pillows_filters_are_upscalers_with_no_weights(
    upscaler: Upscaler, resample: Image.Resampling
):
    image = picture(20, 14).convert("RGBA")
    checks: list[int] = []
    result = upscaler.upscale(image, scale=2.5, budget_bytes=0, check=lambda: checks.append(1))
    assert upscaler.scale is None and result.size == (50, 35) and result.mode == "RGB"
    assert np.array_equal(
        np.asarray(result), np.asarray(image.convert("RGB").resize((50, 35), resample))
    )
    assert checks == [1]
    assert (LANCZOS.name, NEAREST.name) == ("Lanczos", "Nearest")


@pytest.mark.parametrize("scale", [0, -2, float("nan"), float("inf")])
def test_a_scale_that_is_not_above_zero_is_refused(scale: float):
    for upscaler in (LANCZOS, ModelUpscaler("tiny", tiny_net(X4))):
        with pytest.raises(ValueError, match="scale must be a number above 0"):
            upscaler.upscale(picture(8, 8), scale=scale, budget_bytes=BUDGET)


def test_a_file_is_an_upscaler_named_by_its_stem_or_the_name_given(tmp_path: Path):
    path = write_weights(tmp_path / "4x-UltraTiny.safetensors", tiny_net(X4).state_dict())
    assert load_model_upscaler(path).name == "4x-UltraTiny"
    named = load_model_upscaler(path, name="tiny")
    assert (named.name, named.scale) == ("tiny", 4)
