"""bench/distributed_bench.py's smoke run on the tests' tiny SD: a job in process, then on
one worker and on two (each pinned to one core), against one redis-server, with its status
polled through the replica that did not take it; each mode beside in process, the header
and the summary printed."""

import json
from pathlib import Path

import pytest

from bench.distributed_bench import main
from tests.bench.harness import check_run


@pytest.mark.slow
def test_the_smoke_run_measures_each_mode_beside_in_process(tmp_path: Path, capsys):
    out = tmp_path / "distributed.json"
    assert main(["--smoke", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    check_run(document, capsys.readouterr().out, "distributed_bench")
    rows = document["rows"]
    assert [row["mode"] for row in rows] == [
        "in-process", "distributed, 1 worker", "distributed, 2 workers"
    ]  # fmt: skip
    for row in rows:
        assert row["jobs"] == 1 and row["failed_jobs"] == 0 and row["poll_errors"] == 0
        assert row["jobs_per_minute"] > 0
    assert f"in-process {rows[0]['jobs_per_minute']:.2f}/min" in document["summary"]
