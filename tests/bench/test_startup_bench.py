"""bench/startup_bench.py's smoke run: one fresh process a side, the routes loaded as a first
request loads them, the MCP SDK absent from the service's side and loaded on the baseline's."""

import json
from pathlib import Path

from bench.startup_bench import main
from tests.bench.harness import check_run


def test_the_smoke_run_loads_the_routes_beside_the_sdk_at_start(tmp_path: Path, capsys):
    out = tmp_path / "startup.json"
    assert main(["--smoke", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    check_run(document, capsys.readouterr().out, "startup_bench")
    service, baseline = document["rows"]
    assert (service["side"], baseline["side"]) == ("service", "mcp at start")
    assert (service["mcp_loaded"], baseline["mcp_loaded"]) == (False, True)
    for row in (service, baseline):
        assert len(row["samples"]) == 1 and row["cpu_seconds"] > 0 and row["peak_rss_mib"] > 0
