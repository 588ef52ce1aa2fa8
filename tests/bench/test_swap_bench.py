"""bench/swap_bench.py's smoke run: the shelf's swaps (one model freed, the other loaded from
the share) beside plain diffusers' freeing and from_pretrained, both in this process on the
tests' tiny model under two ids, each swap's seconds and peak beside its baseline."""

import json
from pathlib import Path

import pytest

from bench.swap_bench import main
from tests.bench.harness import check_run


def test_the_smoke_run_swaps_there_and_back_beside_plain_diffusers(tmp_path: Path, capsys):
    out = tmp_path / "swap.json"
    assert main(["--smoke", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    check_run(document, capsys.readouterr().out, "swap_tiny")
    rows = document["rows"]
    assert [row["swap"] for row in rows] == ["sdxl -> sd15", "sd15 -> sdxl"]
    for row in rows:
        assert row["service_seconds"] > 0 and row["plain_seconds"] > 0
        assert row["ratio"] == pytest.approx(row["service_seconds"] / row["plain_seconds"])
        assert row["plain_seconds"] == pytest.approx(
            row["plain_free_seconds"] + row["plain_load_seconds"]
        )
        assert row["peak_vs_large_alone"] > 0
