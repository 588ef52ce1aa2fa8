"""bench/load_bench.py's smoke run on the tests' tiny SD: the service's loader, plain
diffusers and the read + cast floor, each in a fresh child, in the same run."""

import json
from pathlib import Path

import pytest

from bench.load_bench import main
from tests.bench.harness import check_run


@pytest.mark.slow
def test_the_smoke_run_loads_beside_plain_diffusers_and_the_floor(tmp_path: Path, capsys):
    out = tmp_path / "load.json"
    assert main(["--smoke", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    check_run(document, capsys.readouterr().out, "load_tiny")
    rows = {row["name"]: row for row in document["results"]}
    assert {"service", "plain", "floor: read + cast"} <= set(rows)
    assert rows["service"]["seconds"] > 0 and rows["plain"]["seconds"] > 0
    assert document["ratios"]["service_vs_plain_seconds"] == pytest.approx(
        rows["service"]["seconds"] / rows["plain"]["seconds"]
    )
