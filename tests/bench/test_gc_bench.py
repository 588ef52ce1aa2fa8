"""bench/gc_bench.py's smoke run: a fresh process started as a worker, its full collections
timed with what the start imported frozen and again with the same heap unfrozen."""

import json
from pathlib import Path

from bench.gc_bench import main
from tests.bench.harness import check_run


def test_the_smoke_run_times_a_started_workers_collection_beside_the_same_heap_unfrozen(
    tmp_path: Path, capsys
):
    out = tmp_path / "gc.json"
    assert main(["--smoke", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    check_run(document, capsys.readouterr().out, "gc_bench")
    service, unfrozen = document["rows"]
    assert (service["side"], unfrozen["side"]) == ("service", "unfrozen")
    assert document["frozen"] > 200_000
    # The service's collection walks what came after the start, not the start's imports.
    assert service["objects_walked"] * 20 < unfrozen["objects_walked"]
    assert unfrozen["collection_seconds"] > 0
