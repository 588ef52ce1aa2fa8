"""Does the service's memory grow across generations? (A known diffusers/A1111 complaint.)

Starts the real app under gunicorn with the tests' tiny pipeline served by a local hub,
pulls it, then runs N sequential synchronous generations and reads the worker's resident
memory (VmRSS) after each. The baseline is the RSS after the first generation, in the same
run: the figure is the growth from there to the last one, and the slope over the second half.

    .venv/bin/python bench/generation_memory_bench.py            # 20 generations
    .venv/bin/python bench/generation_memory_bench.py --count 50
"""

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.local_hub import LocalHub  # noqa: E402
from tests.support.model_service import SD_REPO, pull_until_ready  # noqa: E402
from tests.support.processes import AppServer  # noqa: E402
from tests.support.tiny_model import build_tiny_pipeline  # noqa: E402


def worker_rss_kib(master_pid: int) -> int:
    children = Path(f"/proc/{master_pid}/task/{master_pid}/children").read_text().split()
    status = Path(f"/proc/{children[0]}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--size", default="128x128")
    parser.add_argument("--steps", default="10")
    parser.add_argument("--json", type=Path, default=ROOT / "bench/results/generation_memory.json")
    args = parser.parse_args()
    print(f"machine: {platform.machine()} | python {platform.python_version()}")

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        build_tiny_pipeline(work / "hub" / SD_REPO)
        with LocalHub(work / "hub") as hub:
            env = {
                "MODEL_ID": SD_REPO, "MODEL_DIR": str(work / "share"),
                "DOWNLOAD_CACHE_DIR": str(work / "cache"), "OUTPUT_DIR": str(work / "images"),
                "HF_ENDPOINT": hub.url, "DEVICE": "cpu", "MONGODB_URI": "mongodb://127.0.0.1:9/x",
            }  # fmt: skip
            with AppServer(env, work / "app.log") as app:
                pull_until_ready(app)
                loaded = worker_rss_kib(app.process.pid)
                series = []
                for i in range(args.count):
                    started = time.monotonic()
                    response = requests.post(
                        app.url("/generate"),
                        data={"prompt": f"memory {i}", "size": args.size, "steps": args.steps},
                        timeout=300,
                    )
                    response.raise_for_status()
                    series.append(worker_rss_kib(app.process.pid))
                    print(f"  generation {i + 1:3d}: {time.monotonic() - started:6.2f}s  "
                          f"rss {series[-1] / 1024:8.1f} MiB")  # fmt: skip

    baseline, last = series[0], series[-1]
    half = series[len(series) // 2 :]
    slope = (half[-1] - half[0]) / max(len(half) - 1, 1)
    result = {
        "count": args.count,
        "rss_after_load_mib": loaded / 1024,
        "rss_after_first_mib": baseline / 1024,
        "rss_after_last_mib": last / 1024,
        "growth_mib": (last - baseline) / 1024,
        "growth_ratio": last / baseline,
        "slope_second_half_kib_per_generation": slope,
        "series_mib": [round(v / 1024, 1) for v in series],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    print(
        f"summary: rss after load {loaded / 1024:.0f} MiB, after generation 1 "
        f"{baseline / 1024:.0f} MiB (baseline), after {args.count} {last / 1024:.0f} MiB: "
        f"{result['growth_ratio']:.3f}x, second-half slope {slope:+.0f} KiB/generation"
    )


if __name__ == "__main__":
    main()
