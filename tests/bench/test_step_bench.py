"""bench/step_bench.py's smoke run on the tests' tiny SD: the service's pipeline and plain
diffusers, each in a fresh child, timed per UNet call in the same run."""

import json
from pathlib import Path

import pytest

from bench.step_bench import main
from tests.bench.harness import check_run


@pytest.mark.slow
def test_the_smoke_run_times_a_step_beside_plain_diffusers(tmp_path: Path, capsys):
    out = tmp_path / "step.json"
    assert main(["--smoke", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    check_run(document, capsys.readouterr().out, "step_tiny")
    service, plain = document["results"]
    assert (service["name"], plain["name"]) == ("service", "plain")
    for row in (service, plain):
        assert len(row["step_seconds"]) == 3  # PNDM: steps + 1 UNet calls, the first a warm-up
        assert row["median_step_seconds"] > 0 and row["peak_rss_bytes"] > 0
    assert document["ratios"]["service_vs_plain_step"] == pytest.approx(
        service["median_step_seconds"] / plain["median_step_seconds"]
    )
