"""Start-up benchmark: what a web process imports before its first answer, beside the same with
the MCP SDK imported at start, in fresh processes taken in turns.

Why it exists: every gunicorn replica, worker and `manage.py` command that loads the routes
pays their imports once per start, and the suite starts hundreds. The MCP SDK and its tools
load with a process's first MCP call (imagegen/api/mcp.py); the baseline is what each start
paid when they loaded with the routes.

Each child runs `django.setup()` and loads the URLconf, as a process's first request does,
then reports its CPU seconds (getrusage, the whole process) and its peak RSS; the baseline child
also imports imagegen.api.mcp_tools. Children alternate (service, baseline, service, ...), and
each figure is the median of --rounds children a side.

    .venv/bin/python bench/startup_bench.py            # 5 rounds
    .venv/bin/python bench/startup_bench.py --smoke    # 1 round: tests
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from bench.common import fmt_ratio, median, ratio  # noqa: E402

SIDES = ("service", "mcp at start")


def child(args: argparse.Namespace) -> int:
    import django

    django.setup()
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018  (loads the URLconf, as a first request does)
    if args.child == "mcp at start":
        import imagegen.api.mcp_tools  # noqa: F401
    usage = resource.getrusage(resource.RUSAGE_SELF)
    common.emit_child_result({
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 3),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "mcp_loaded": "mcp" in sys.modules,
    })  # fmt: skip
    return 0


def run(args: argparse.Namespace) -> int:
    machine = common.machine_info()
    common.print_machine(machine)
    print(f"{args.rounds} round(s): django.setup() and the URLconf in a fresh process", flush=True)
    samples: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory(prefix="startup-bench-") as work:
        env = {"DJANGO_SETTINGS_MODULE": "config.settings", "SECRET_KEY": "bench",
               "PRELOAD_MODEL_CODE": "0", "MODEL_DIR": str(Path(work) / "share")}  # fmt: skip
        for _ in range(args.rounds):
            for side in SIDES:
                log = Path(work) / "child.log"
                samples[side].append(common.run_child(Path(__file__), [side], log, 120, env))
    rows = []
    for side in SIDES:
        runs = samples[side]
        row = {
            "side": side,
            "cpu_seconds": median([r["cpu_seconds"] for r in runs]),
            "peak_rss_mib": median([r["peak_rss_mib"] for r in runs]),
            "mcp_loaded": all(r["mcp_loaded"] for r in runs),
            "samples": runs,
        }
        rows.append(row)
        print(
            f"  {side}: CPU {row['cpu_seconds']:.2f} s, peak RSS {row['peak_rss_mib']:.0f} MiB"
            f" (median of {len(runs)}); MCP SDK loaded: {row['mcp_loaded']}",
            flush=True,
        )
    service, baseline = rows
    cpu = ratio(service["cpu_seconds"], baseline["cpu_seconds"])
    rss = ratio(service["peak_rss_mib"], baseline["peak_rss_mib"])
    summary = (
        f"summary: a web process's start to its URLconf: CPU {service['cpu_seconds']:.2f} s "
        f"against {baseline['cpu_seconds']:.2f} s with the MCP SDK at start ({fmt_ratio(cpu)}), "
        f"peak RSS {service['peak_rss_mib']:.0f} against {baseline['peak_rss_mib']:.0f} MiB "
        f"({fmt_ratio(rss)})"
    )
    document = {"config": {"rounds": args.rounds}, "rows": rows}
    common.finish("startup_bench", machine, document, summary, args.json)
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="children a side (5)")
    parser.add_argument("--smoke", action="store_true", help="1 round: proves the run, for tests")
    parser.add_argument("--json", type=Path, help="where to write results")
    parser.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds = 1
    return args


def main(argv: list[str] | None = None) -> int:
    return common.main(parse_args, run, child, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
