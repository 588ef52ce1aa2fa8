"""What a Prometheus scrape costs a running generation: a step's time with GET /metrics
scraped every second against none, in the same run.

Why it exists: docs/metrics.md says scraping costs nothing measurable on a running
generation; this is the measurement. One run starts the real app under gunicorn
(tests.support.processes.AppServer, the project's gunicorn config, DEVICE=cpu) on the tests'
tiny SD pipeline from a local hub, pulls it, and runs generations in pairs, one with a scraper
thread fetching /metrics every `--interval` seconds for the whole generation and one without,
alternating which goes first. A step's time is the job's own denoise time over its steps (its
image record's timings), so the scraper's own requests are not in it. Each scrape's own time
at the client is printed too: an upper bound on what a scrape takes from the generation, which
stays readable on a machine too busy for the step times to tell a few percent apart.

    .venv/bin/python bench/metrics_bench.py              # 4 pairs, 64x64, 100 steps (2-5 min)
    .venv/bin/python bench/metrics_bench.py --pairs 2    # quicker
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from tests.support.local_hub import LocalHub  # noqa: E402
from tests.support.model_service import SD_REPO, model_service_env, pull_until_ready  # noqa: E402
from tests.support.processes import AppServer  # noqa: E402
from tests.support.tiny_model import build_tiny_pipeline  # noqa: E402


def step_seconds(app: AppServer, *, size: str, steps: int, seed: int) -> float:
    """One synchronous generation; its denoise time over its steps, as the service measured."""
    answer = requests.post(
        app.url("/generate"), timeout=600,
        data={"prompt": "a lighthouse", "size": size, "steps": str(steps), "seed": str(seed),
              "async": "true"},
    )  # fmt: skip
    answer.raise_for_status()
    job_id = answer.json()["id"]
    while (job := requests.get(app.url(f"/jobs/{job_id}"), timeout=30).json())["state"] in (
        "queued", "running",
    ):  # fmt: skip
        time.sleep(0.05)
    assert job["state"] == "succeeded", job
    return job["image"]["timings"]["denoise_seconds"] / steps


def scraping(app: AppServer, interval: float, stop: threading.Event, took: list[float]) -> None:
    """Scrapes until stopped; each scrape's time at the client (an upper bound on what the
    service spent on it) goes into `took`."""
    with requests.Session() as session:  # one connection, as Prometheus keeps
        while not stop.wait(interval):
            started = time.perf_counter()
            response = session.get(app.url("/metrics"), timeout=30)
            response.raise_for_status()
            took.append(time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--size", default="64x64")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between scrapes")
    parser.add_argument("--no-json", dest="json", action="store_false", help="no bench/results/")
    args = parser.parse_args(argv)
    machine = common.machine_info()
    common.print_machine(machine)

    with tempfile.TemporaryDirectory(prefix="metrics-bench-") as scratch:
        work = Path(scratch)
        build_tiny_pipeline(work / "hub" / SD_REPO, layout="sd")
        with LocalHub(work / "hub") as hub:
            env = model_service_env(hub.url, work / "share", work)
            with AppServer({**env, "GEN_MAX_STEPS": "500"}, work / "app.log") as app:
                pull_until_ready(app, timeout=120)
                step_seconds(app, size=args.size, steps=2, seed=0)  # warm-up
                without: list[float] = []
                with_scrapes: list[float] = []
                scrapes: list[float] = []
                for pair in range(args.pairs):
                    order = (False, True) if pair % 2 == 0 else (True, False)
                    for scraped in order:
                        stop = threading.Event()
                        scraper = threading.Thread(
                            target=scraping, args=(app, args.interval, stop, scrapes)
                        )
                        if scraped:
                            scraper.start()
                        seconds = step_seconds(app, size=args.size, steps=args.steps, seed=pair)
                        stop.set()
                        if scraped:
                            scraper.join()
                        (with_scrapes if scraped else without).append(seconds)
                        label = "scraped" if scraped else "none"
                        print(f"pair {pair}, {label}: {seconds * 1000:.2f} ms a step", flush=True)

    base, scraped_median = statistics.median(without), statistics.median(with_scrapes)
    print(f"{args.pairs} pairs of {args.steps} steps at {args.size}; {len(scrapes)} scrapes")
    print(f"step, no scrape:          median {base * 1000:.2f} ms  ({len(without)} jobs)")
    print(f"step, scrape every {args.interval:g} s: median {scraped_median * 1000:.2f} ms")
    print(f"ratio (scraped / none):   {scraped_median / base:.3f}")
    took = statistics.median(scrapes)
    print(
        f"one scrape at the client:  median {took * 1000:.2f} ms, at most "
        f"{took / args.interval:.2%} of one core at one scrape every {args.interval:g} s"
    )
    print(
        f"summary: s/step scraped/none {scraped_median / base:.3f} "
        f"({scraped_median * 1000:.2f} / {base * 1000:.2f} ms); a scrape {took * 1000:.2f} ms"
    )
    if args.json:
        common.write_json("metrics_bench", {
            "args": vars(args), "machine": machine, "step_seconds_none": without,
            "step_seconds_scraped": with_scrapes, "scrape_seconds": scrapes,
        })  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
