"""bench/upscale_bench.py, so it cannot rot: its quick run (a tiny RRDBNet on 96x96, in
process, read back from a Real-ESRGAN-layout file by the service's loader) prints the
harness's header, the service's tiled run beside the one pass, the runs beside a resident
tiny model (one at the budget given, one at the budget its peak target leaves), each with its
peak memory, and the summary; it measures nothing."""

import json
from pathlib import Path

import pytest

from bench.upscale_bench import main
from tests.bench.harness import check_run
from tests.support.model_service import SD_REPO


def test_the_quick_run_measures_tiles_beside_one_pass(tmp_path: Path, capsys, hub_root: Path):
    out = tmp_path / "upscale.json"
    assert main(["--quick", "--resident", str(hub_root / SD_REPO), "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    printed = capsys.readouterr().out
    check_run(document, printed, "upscale")
    plain, service, resident, targeted = document["runs"]
    assert [r["variant"] for r in document["runs"]] == [
        "one_pass", "service", "resident", "resident"
    ]  # fmt: skip
    assert {r["size"] for r in document["runs"]} == {96}
    # A 10 MiB budget cuts the picture in 3 x 3 tiles of 33 (+16 margins): more pixels computed.
    assert (service["tiles"], service["tile_side"], plain["tiles"]) == (9, 33, 1)
    assert service["computed_pixels"] > plain["computed_pixels"] == 96 * 96
    for run in document["runs"]:
        assert run["seconds"] > 0 and run["peak_during_bytes"] > run["weights_bytes"] > 0
    assert plain["resident_model_bytes"] == service["resident_model_bytes"] == 0
    # The model held: the process's RSS with it loaded, and the targeted budget is what 1.1x
    # that (plus the upscaler) leaves beside what was resident before the upscale.
    assert resident["resident_model_bytes"] > 0 and resident["budget_bytes"] == 10 * 2**20
    assert (
        targeted["budget_bytes"]
        == int(1.1 * (targeted["resident_model_bytes"] + targeted["weights_bytes"]))
        - targeted["rss_before_bytes"]
    )
    ratios = document["ratios"]
    assert ratios["service_vs_one_pass_seconds"] == pytest.approx(
        service["seconds"] / plain["seconds"]
    )
    assert len(ratios["resident_peak_over_model_plus_upscaler"]) == 2
    assert isinstance(document["max_pixel_difference"], int)
    assert "one_pass" in printed and "service" in printed and "resident" in printed
