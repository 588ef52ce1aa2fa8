"""What every benchmark's run must carry, whatever it measures: the harness's header (the
machine, the date and the commit the figures belong to) and its one-line summary."""

import re
from typing import Any


def check_run(document: dict[str, Any], output: str, benchmark: str) -> None:
    machine = document["machine"]
    assert document["benchmark"] == benchmark
    assert re.fullmatch(r"[0-9a-f]{7,}(\+changes)?", machine["commit"])
    assert machine["date"] and machine["load_average_at_end"]
    assert f"run: {machine['date']}, commit {machine['commit']}" in output
    assert document["summary"].startswith("summary: ")
    assert output.rstrip().endswith(document["summary"])
