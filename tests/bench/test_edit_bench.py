"""bench/edit_bench.py, so it cannot rot: its smoke run (the tests' tiny SDXL placed on a
share as the shipped default, a real app under gunicorn and a real plain diffusers child,
img2img at 64x64) prints the harness's header, the edit beside its plain diffusers baseline
and the summary, and what it compares is the same work: the service ran an img2img with the
preset's steps cut by the strength, and plain diffusers made the same image. The checks
that keep a full run honest (the service ran other work: refused), the table's arithmetic
for every edit and the inputs are tested in a second."""

import json
from pathlib import Path

import pytest
from PIL import Image

from bench.edit_bench import (
    CASES,
    EDIT_STEPS,
    IMG2IMG,
    INPAINT,
    ONLY_MASKED,
    TEXT_TO_IMAGE,
    Run,
    check_ran,
    comparisons,
    parse_args,
    run,
    write_inputs,
)
from tests.bench.harness import check_run

HEADERS = {"X-Steps": str(EDIT_STEPS), "X-Guidance": "0", "X-Scheduler": "Euler SGM Uniform"}


def job(edit: dict | None) -> dict:
    return {"image": {"parameters": {} if edit is None else {"edit": edit}}}


@pytest.mark.slow
def test_the_smoke_run_measures_an_edit_beside_its_baseline(tmp_path: Path, capsys):
    out = tmp_path / "edit.json"
    assert run(parse_args(["--smoke", "--hub", str(tmp_path / "hub"), "--json", str(out)])) == 0
    document = json.loads(out.read_text())
    printed = capsys.readouterr().out
    check_run(document, printed, "edit_bench")
    runs = {r["variant"]: r for r in document["runs"] if r["case"] == "img2img"}
    assert set(runs) == {"service", "plain"} and len(document["runs"]) == 2
    for measured in runs.values():
        assert measured["calls"] == CASES["img2img"].steps == EDIT_STEPS
        assert measured["total"] > 0 and measured["peak_rss_bytes"] > 0
    assert runs["service"]["detail"]["size"] == [64, 64]
    # The same work on both sides: plain diffusers' img2img image is the service's.
    assert document["image_difference"]["img2img"] < 0.5
    rows = {row["what"]: row for row in document["comparisons"]}
    total = rows["img2img total"]
    assert total["against"] == "plain" and total["target"] == 1.05
    assert (total["value"], total["baseline"]) == (runs["service"]["total"], runs["plain"]["total"])
    assert "img2img total" in printed and "img2img total: " in document["summary"]


def test_a_service_run_of_other_work_than_asked_is_refused():
    check_ran(IMG2IMG, HEADERS, job({"mask": None, "only_masked": None}))
    inpaint = {"mask": {"sha256": "m"}, "only_masked": None}
    check_ran(INPAINT, HEADERS, job(inpaint))
    with pytest.raises(RuntimeError, match="X-Steps"):  # the strength not applied
        check_ran(IMG2IMG, HEADERS | {"X-Steps": "4"}, job({"mask": None}))
    with pytest.raises(RuntimeError, match="X-Scheduler"):  # not the shipped preset
        check_ran(IMG2IMG, HEADERS | {"X-Scheduler": "Euler"}, job({"mask": None}))
    with pytest.raises(RuntimeError, match="not img2img"):  # no image reached the job
        check_ran(IMG2IMG, HEADERS, job(None))
    with pytest.raises(RuntimeError, match="not inpaint"):  # the mask was lost
        check_ran(INPAINT, HEADERS, job({"mask": None}))
    with pytest.raises(RuntimeError, match="only_masked"):  # the whole picture was worked
        check_ran(ONLY_MASKED, HEADERS, job(inpaint))
    check_ran(TEXT_TO_IMAGE, HEADERS | {"X-Steps": "4"}, job(None))


def measured(case: str, variant: str, total: float, peak_gib: float) -> Run:
    return Run(case=case, variant=variant, encode=1.0, denoise=total - 2, decode=0.5,
               rest=0.5, total=total, calls=2, cpu=total, peak_rss_bytes=int(peak_gib * 2**30),
               load="0")  # fmt: skip


def test_each_figure_is_held_to_its_own_baseline_and_target():
    rows = {
        row["what"]: row
        for row in comparisons([
            measured("text_to_image", "service", 20.0, 10.0),
            measured("img2img", "service", 10.5, 10.4),
            measured("img2img", "plain", 10.0, 9.0),
            measured("inpaint", "service", 12.0, 10.6),
            measured("inpaint", "plain", 10.0, 9.0),
            measured("only_masked", "service", 3.0, 10.2),
        ])
    }  # fmt: skip
    assert rows["img2img total"]["ratio"] == pytest.approx(1.05) and rows["img2img total"]["met"]
    assert rows["inpaint total"]["ratio"] == pytest.approx(1.2) and not rows["inpaint total"]["met"]
    assert rows["img2img denoise"]["ratio"] == pytest.approx(8.5 / 8.0)
    assert rows["img2img peak RSS"]["ratio"] == pytest.approx(1.04)  # of text-to-image's
    assert not rows["inpaint peak RSS"]["met"]
    only = rows["only_masked total"]
    assert only["ratio"] == pytest.approx(0.25) and only["baseline"] == 12.0 and only["met"]


def test_the_mask_is_a_centred_square_a_quarter_of_the_side(tmp_path: Path):
    image, mask = write_inputs(64, tmp_path)
    with Image.open(image) as picture, Image.open(mask) as marked:
        assert picture.size == marked.size == (64, 64) and picture.mode == "RGB"
        assert marked.getbbox() == (24, 24, 40, 40)
        assert marked.histogram()[255] == 16 * 16
