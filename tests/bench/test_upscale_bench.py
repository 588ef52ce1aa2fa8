"""bench/upscale_bench.py, so it cannot rot: its quick run (a tiny RRDBNet on 96x96, in
process, read back from a Real-ESRGAN-layout file by the service's loader) prints the
harness's header, the service's tiled run beside the one pass (with and without a resident
tiny model; beside it, at the budget given and at the budget its peak target leaves), each
with its peak memory, and the summary; it measures nothing."""

import json
from pathlib import Path

import pytest

from bench.upscale_bench import main
from imagegen.generation.upscale import AUTO_TILE_MIN
from tests.bench.harness import check_run
from tests.support.model_service import SD_REPO


def test_the_quick_run_measures_tiles_beside_one_pass(tmp_path: Path, capsys):
    out = tmp_path / "upscale.json"
    assert main(["--quick", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    printed = capsys.readouterr().out
    check_run(document, printed, "upscale")
    plain, service = document["runs"]
    assert (plain["variant"], service["variant"]) == ("one_pass", "service")
    assert plain["size"] == service["size"] == 96
    # A 10 MiB budget cuts the picture in 3 x 3 tiles of 33 (+16 margins): more pixels computed.
    assert (service["tiles"], service["tile_side"], plain["tiles"]) == (9, 33, 1)
    assert service["computed_pixels"] > plain["computed_pixels"] == 96 * 96
    for run in (plain, service):
        assert run["seconds"] > 0 and run["peak_during_bytes"] > run["weights_bytes"] > 0
        assert run["resident_model_bytes"] == 0
    ratios = document["ratios"]
    assert ratios["service_vs_one_pass_seconds"] == pytest.approx(
        service["seconds"] / plain["seconds"]
    )
    assert ratios["service_computed_pixels"] == pytest.approx(service["computed_pixels"] / 96**2)
    assert isinstance(document["max_pixel_difference"], int)
    assert "one_pass" in printed and "service" in printed


def test_beside_a_resident_model_the_target_sizes_the_budget(tmp_path: Path, hub_root: Path):
    out = tmp_path / "upscale.json"
    assert main(["--quick", "--resident", str(hub_root / SD_REPO), "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    assert [r["variant"] for r in document["runs"]] == ["one_pass", "resident", "resident"]
    _, given, targeted = document["runs"]
    # The model held: the process's RSS with it loaded; the first run at the budget given, the
    # second at what 1.1x that (plus the upscaler) leaves beside what was resident before.
    assert given["resident_model_bytes"] > 0 and given["budget_bytes"] == 10 * 2**20
    assert targeted["budget_bytes"] == (
        int(1.1 * (targeted["resident_model_bytes"] + targeted["weights_bytes"]))
        - targeted["rss_before_bytes"]
    )
    assert len(document["ratios"]["resident_peak_over_model_plus_upscaler"]) == 2


def test_the_automatic_budget_is_the_services_rule_beside_the_model(tmp_path: Path, hub_root: Path):
    """--budget auto sizes the tiles as the service does: a tenth of the resident model's fp32
    weights less the picture's buffers, at least AUTO_TILE_MIN (the tiny model's tenth is
    less, so the floor: the 96x96 picture in one tile); --no-target skips the target's run."""
    out = tmp_path / "upscale.json"
    argv = ["--quick", "--budget", "auto", "--no-target", "--resident", str(hub_root / SD_REPO)]
    assert main([*argv, "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    assert document["config"]["budget_bytes"] == "auto"
    assert [r["variant"] for r in document["runs"]] == ["one_pass", "resident"]
    served = document["runs"][1]
    assert served["budget_bytes"] == AUTO_TILE_MIN and served["tiles"] == 1
    assert served["peak_during_bytes"] > served["resident_model_bytes"] > 0
