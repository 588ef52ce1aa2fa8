"""bench/hires_bench.py, so it cannot rot: its quick run (the tests' tiny SD, 64 -> 128, both
sides in this process) prints the harness's header, the service's hires fix and its direct
render through the native API beside plain diffusers doing each by hand, checks that both
sides ran the same UNet calls and made images of the target's size, and ends with the
summary; it measures nothing."""

import json
from pathlib import Path

import pytest

from bench.hires_bench import main, second_pass_timesteps
from imagegen.generation.hires import second_pass_schedule
from tests.bench.harness import check_run


def test_the_quick_run_times_the_hires_fix_and_the_direct_render_beside_plain(
    tmp_path: Path, capsys
):
    out = tmp_path / "hires.json"
    assert main(["--quick", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    printed = capsys.readouterr().out
    check_run(document, printed, "hires_tiny")
    runs = {(r["side"], r["variant"]): r for r in document["runs"]}
    assert sorted(runs) == [
        ("plain", "direct"), ("plain", "hires"), ("service", "direct"), ("service", "hires")
    ]  # fmt: skip
    for run in runs.values():
        assert run["size"] == [128, 128] and run["seconds"] > 0
    # The tiny VAE halves a side: the hires fix's first pass on 32x32 latents, its second and
    # the direct render on 64x64, 2 steps each, the same on both sides.
    for side in ("service", "plain"):
        assert runs[(side, "hires")]["calls"] == {"32": 2, "64": 2}
        assert runs[(side, "direct")]["calls"] == {"64": 2}
    headers = runs[("service", "hires")]["detail"]["headers"]
    assert (headers["X-Size"], headers["X-Hires-Size"], headers["X-Steps"]) == (
        "64x64", "128x128", "4"
    )  # fmt: skip
    ratios = document["ratios"]
    for variant in ("hires", "direct"):
        assert ratios[f"{variant}_service_vs_plain"] == pytest.approx(
            runs[("service", variant)]["seconds"] / runs[("plain", variant)]["seconds"]
        )
    # The same generator through both passes on both sides: the same picture.
    assert document["image_difference"] == {"hires": 0.0, "direct": 0.0}
    assert "service" in printed and "plain" in printed


def test_plain_diffusers_asks_img2img_for_the_timesteps_that_run_the_same_steps():
    # diffusers runs int(timesteps x strength) of them: 4 steps at 0.7 need 6, as A1111 asks.
    assert [second_pass_timesteps(steps, 0.7) for steps in (1, 2, 4, 8)] == [2, 3, 6, 12]
    assert second_pass_timesteps(4, 1.0) == 4
    for steps in range(1, 30):  # what the service schedules for its second pass
        assert second_pass_timesteps(steps, 0.7) == second_pass_schedule(steps, 0.7)


def test_rounds_alternate_the_sides_and_the_ratios_are_the_rounds_medians(tmp_path: Path):
    out = tmp_path / "hires.json"
    assert main(["--quick", "--rounds", "3", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    assert document["config"]["rounds"] == 3
    # Each round has all four requests: service's child, then plain's.
    assert [(r["round"], r["side"]) for r in document["runs"]] == [
        (number, side) for number in (1, 2, 3) for side in ("service",) * 2 + ("plain",) * 2
    ]
    assert len(document["rounds"]) == 3
    for key, value in document["ratios"].items():
        each = sorted(r["ratios"][key] for r in document["rounds"])
        assert value == pytest.approx(each[1])
    for number, each in enumerate(document["rounds"], start=1):
        seconds = {
            f"{r['side']}_{r['variant']}": r["seconds"]
            for r in document["runs"]
            if r["round"] == number
        }
        assert each["seconds"] == pytest.approx(seconds)
        assert each["ratios"]["hires_service_vs_plain"] == pytest.approx(
            seconds["service_hires"] / seconds["plain_hires"]
        )


def test_rounds_below_one_are_refused_naming_the_option(capsys):
    with pytest.raises(SystemExit):
        main(["--quick", "--rounds", "0"])
    assert "--rounds: at least 1, not 0" in capsys.readouterr().err
