"""bench/distributed_bench.py's quick run on the tests' tiny SD: the same jobs in process,
then on one worker and on two (each pinned to one core), against one redis-server, with a
job's status polled through the replica that did not take it."""

import json
from pathlib import Path

import pytest

from bench.distributed_bench import main
from tests.bench.harness import check_run


@pytest.mark.slow
def test_the_quick_run_measures_each_mode_beside_in_process(tmp_path: Path, capsys):
    out = tmp_path / "distributed.json"
    assert main(["--quick", "--model", "tiny", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    check_run(document, capsys.readouterr().out, "distributed_bench")
    rows = document["rows"]
    assert len(rows) == 3
    for row in rows:
        assert row["jobs"] == 2 and row["failed_jobs"] == 0 and row["poll_errors"] == 0
        assert row["jobs_per_minute"] > 0
