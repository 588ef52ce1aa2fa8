"""Collection benchmark: what one full garbage collection walks in a started worker, and how
long it holds the GIL, with what the start imported frozen (the service) beside the same heap
unfrozen (the baseline).

Why it exists: a worker or an in-process web process collects in full after every cancelled or
failed job and every model it frees, and Python collects in full on its own as objects pile
up; each holds the GIL, so /health and every request thread wait. The start's imports are
most of the heap and live as long as the process (imagegen/model/preload.py freezes them).

Each round is a fresh process that starts as a worker does before its first job (Django set
up, then imagegen.model.preload.import_loading_code, which freezes), then times --collections
full collections (CPU seconds, their median), unfreezes the same heap and times as many again.
Figures are the medians over the rounds.

    .venv/bin/python bench/gc_bench.py            # 3 rounds
    .venv/bin/python bench/gc_bench.py --smoke    # 1 round, 3 collections: tests
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from bench.common import fmt_ratio, median, ratio  # noqa: E402

SIDES = ("service", "unfrozen")


def timed_collections(count: int) -> dict[str, Any]:
    seconds = []
    for _ in range(count):
        started = time.process_time()
        gc.collect()
        seconds.append(time.process_time() - started)
    return {"objects_walked": len(gc.get_objects()), "collection_seconds": median(seconds)}


def child(args: argparse.Namespace) -> int:
    import django

    django.setup()
    from imagegen.model.preload import import_loading_code

    import_loading_code()
    result = {"frozen": gc.get_freeze_count(), "service": timed_collections(args.collections)}
    gc.unfreeze()
    result["unfrozen"] = timed_collections(args.collections)
    common.emit_child_result(result)
    return 0


def run(args: argparse.Namespace) -> int:
    machine = common.machine_info()
    common.print_machine(machine)
    print(
        f"{args.rounds} round(s): a fresh process started as a worker, "
        f"{args.collections} full collections a side",
        flush=True,
    )
    runs = []
    with tempfile.TemporaryDirectory(prefix="gc-bench-") as work:
        env = {"DJANGO_SETTINGS_MODULE": "config.settings", "SECRET_KEY": "bench",
               "MODEL_DIR": str(Path(work) / "share")}  # fmt: skip
        for _ in range(args.rounds):
            log = Path(work) / "child.log"
            child_args = ["--collections", str(args.collections)]
            runs.append(common.run_child(Path(__file__), child_args, log, 300, env))
    rows = []
    for side in SIDES:
        row = {
            "side": side,
            "objects_walked": median([r[side]["objects_walked"] for r in runs]),
            "collection_seconds": median([r[side]["collection_seconds"] for r in runs]),
            "samples": [r[side] for r in runs],
        }
        rows.append(row)
        print(
            f"  {side}: a full collection walks {row['objects_walked']:,.0f} objects in "
            f"{row['collection_seconds'] * 1000:.3f} ms of CPU (median of {len(runs)})",
            flush=True,
        )
    service, unfrozen = rows
    summary = (
        f"summary: a started worker's full collection: "
        f"{service['collection_seconds'] * 1000:.3f} ms against "
        f"{unfrozen['collection_seconds'] * 1000:.3f} ms unfrozen "
        f"({fmt_ratio(ratio(service['collection_seconds'], unfrozen['collection_seconds']))}), "
        f"{service['objects_walked']:,.0f} objects walked against "
        f"{unfrozen['objects_walked']:,.0f}"
    )
    document = {
        "config": {"rounds": args.rounds, "collections": args.collections},
        "frozen": median([r["frozen"] for r in runs]),
        "rows": rows,
    }
    common.finish("gc_bench", machine, document, summary, args.json)
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes (3)")
    parser.add_argument("--collections", type=int, default=5, help="a side, each round (5)")
    parser.add_argument("--smoke", action="store_true", help="1 round: proves the run, for tests")
    parser.add_argument("--json", type=Path, help="where to write results")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.collections = 1, 3
    return args


def main(argv: list[str] | None = None) -> int:
    return common.main(parse_args, run, child, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
