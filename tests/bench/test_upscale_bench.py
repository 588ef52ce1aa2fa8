"""bench/upscale_bench.py, so it cannot rot: its quick run (a tiny RRDBNet on 96x96, in
process) prints the harness's header, the tiled run beside the one pass with each one's peak
memory, and the summary; it measures nothing."""

import json
from pathlib import Path

import pytest

from bench.upscale_bench import main
from tests.bench.harness import check_run


def test_the_quick_run_measures_tiles_beside_one_pass(tmp_path: Path, capsys):
    out = tmp_path / "upscale.json"
    assert main(["--quick", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    printed = capsys.readouterr().out
    check_run(document, printed, "upscale")
    tiled, plain = document["runs"]
    assert (tiled["variant"], plain["variant"]) == ("tiled", "one_pass")
    assert tiled["size"] == plain["size"] == 96
    # A 10 MiB budget cuts the picture in 3 x 3 tiles of 33 (+16 margins): more pixels computed.
    assert (tiled["tiles"], tiled["tile_side"], plain["tiles"]) == (9, 33, 1)
    assert tiled["computed_pixels"] > plain["computed_pixels"] == 96 * 96
    for run in (tiled, plain):
        assert run["seconds"] > 0 and run["peak_rss_bytes"] > run["weights_bytes"] > 0
    assert document["ratios"]["tiled_vs_one_pass_seconds"] == pytest.approx(
        tiled["seconds"] / plain["seconds"]
    )
    assert isinstance(document["max_pixel_difference"], int)
    assert "tiled" in printed and "one_pass" in printed
