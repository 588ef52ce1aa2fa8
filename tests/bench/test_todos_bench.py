"""bench/todos_bench.py's smoke run: the service started as ./scripts/serve starts it, each
operation beside its floors (one pymongo call, one bare HTTP round trip) in the same run.
The Express + Mongoose peer is left out here: it needs Node and its packages."""

import json
from pathlib import Path

import pytest

from bench.todos_bench import main
from tests.bench.harness import check_run


@pytest.mark.slow
def test_the_smoke_run_measures_each_operation_beside_its_floors(tmp_path: Path, capsys):
    out = tmp_path / "todos.json"
    assert main(["--smoke", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    check_run(document, capsys.readouterr().out, "todos")
    service = {r["name"]: r for r in document["results"] if r["kind"] == "service"}
    assert {"create", "get", "list 10"} <= set(service)
    for row in service.values():
        assert row["errors"] == 0 and row["rps"] > 0
        assert row["ratio_to_floor"] == pytest.approx(row["rps"] / row["floor_rps"])
