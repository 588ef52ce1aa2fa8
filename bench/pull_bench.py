"""Cold-pull benchmark: the service's download path against a raw transfer of the same bytes.

Why it exists: a cold revision's first pull moves gigabytes from the hub onto the share, and
the service's path (huggingface_hub into its local cache, then a copy onto the share under
a temporary name, manifest last) must not cost much more than the transfer itself. One run
serves the cached full-size random-weight repo (bench/model_fixture.py) from a LocalHub in
its own process on 127.0.0.1 and measures, for exactly the files the service selects:

- the service: `imagegen.model.hub.download_to_share` with a ModelSource whose endpoint is that
  hub, into a fresh MODEL_DIR and download cache (DOWNLOAD_WORKERS files in parallel);
- raw HTTP (the fair transfer baseline): one plain urllib GET per file from the same hub,
  one stream at a time, written to a file;
- raw copy: `shutil.copyfile` of each file from the hub's folder (no network at all).

Rounds are interleaved and the best of each is reported (on loopback, noise only slows a
transfer down). Every destination is removed after its round. The first, untimed service
pull (it finds the files the service selects) also samples the local download cache's disk
use: its peak, and what is left after the pull.

    .venv/bin/python bench/pull_bench.py             # SD 1.5 (~2.1 GB), 2 rounds, ~1-2 min
    .venv/bin/python bench/pull_bench.py --quick     # 1 round
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# Before huggingface_hub is imported (it reads these once).
os.environ.update({"HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HUB_DISABLE_TELEMETRY": "1"})

from bench import common  # noqa: E402
from bench.common import fmt_ratio, ratio  # noqa: E402
from bench.model_fixture import (  # noqa: E402
    MODELS,
    VARIANT,
    ensure_model,
    hub_process,
    scratch_dir,
)
from imagegen.model import hub, share  # noqa: E402
from imagegen.model.share import ModelFile  # noqa: E402

CHUNK = 16 * 1024 * 1024


@dataclass
class Row:
    name: str
    what: str
    bytes: int
    seconds: float  # best round
    samples: list[float] = field(default_factory=list)

    @property
    def mb_s(self) -> float:
        return self.bytes / self.seconds / 1e6


# --- the three transfers ----------------------------------------------------------------------


def service_pull(endpoint: str, repo_id: str, dest: Path, workers: int) -> int:
    source = hub.ModelSource(
        model_id=repo_id,
        revision="main",
        variant=VARIANT,
        model_dir=dest / "share",
        cache_dir=dest / "cache",
        endpoint=endpoint,
        workers=workers,
    )
    manifest = hub.download_to_share(source, hub.DownloadProgress())
    return manifest.total_bytes


def http_get(endpoint: str, repo_id: str, files: list[ModelFile], dest: Path) -> int:
    total = 0
    for f in files:
        target = dest / f.path
        target.parent.mkdir(parents=True, exist_ok=True)
        url = f"{endpoint}/{repo_id}/resolve/main/{f.path}"
        with urllib.request.urlopen(url, timeout=600) as response, target.open("wb") as out:
            shutil.copyfileobj(response, out, length=CHUNK)
        total += target.stat().st_size
    return total


def raw_copy(repo_dir: Path, files: list[ModelFile], dest: Path) -> int:
    total = 0
    for f in files:
        target = dest / f.path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(repo_dir / f.path, target)
        total += target.stat().st_size
    return total


def disk_use(path: Path) -> int:
    """Bytes allocated under `path`, as du counts them: blobs, partial downloads, links."""
    total = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            with contextlib.suppress(OSError):  # renamed or removed since the listing
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


class DiskPeak(threading.Thread):
    """Samples disk_use(path) every 20 ms until stopped, for the peak during a pull."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path, self.peak, self._done = path, 0, threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.02):
            self.peak = max(self.peak, disk_use(self.path))

    def stop(self) -> int:
        self._done.set()
        self.join()
        return self.peak


def selected_files(endpoint: str, repo_id: str, work: Path) -> tuple[list[ModelFile], int, int]:
    """The files the service would fetch (one untimed pull, read back from its manifest), and
    its local download cache's peak disk use during that pull and its disk use after it."""
    dest = work / "select"
    sampler = DiskPeak(dest / "cache")
    try:
        sampler.start()
        try:
            service_pull(endpoint, repo_id, dest, workers=8)
        finally:
            peak = sampler.stop()
        source_path = dest / "share" / repo_id.replace("/", "--")
        manifest = share.read_manifest(source_path)
        assert manifest is not None
        return list(manifest.files), max(peak, disk_use(dest / "cache")), disk_use(dest / "cache")
    finally:
        shutil.rmtree(dest, ignore_errors=True)


# --- the run -------------------------------------------------------------------------------------


def timed(transfer: Callable[[Path], int], dest: Path) -> tuple[float, int]:
    dest.mkdir(parents=True)
    try:
        started = time.perf_counter()
        moved = transfer(dest)
        return time.perf_counter() - started, moved
    finally:
        shutil.rmtree(dest, ignore_errors=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="sd15", choices=sorted(MODELS))
    parser.add_argument("--rounds", type=int, help="transfers per method (2; 1 with --quick)")
    parser.add_argument("--workers", type=int, default=8, help="DOWNLOAD_WORKERS (8)")
    parser.add_argument("--quick", action="store_true", help="a smaller run")
    parser.add_argument("--json", type=Path, help="where to write results")
    args = parser.parse_args(argv)
    args.rounds = args.rounds or (1 if args.quick else 2)
    if args.rounds < 1 or args.workers < 1:
        parser.error("--rounds and --workers must be positive")
    return args


def print_table(rows: list[Row], http: Row) -> None:
    header = f"{'method':<8} {'GB':>6} {'best s':>7} {'MB/s':>7} {'vs http':>7}  rounds s  what"
    print()
    print(header)
    print("-" * (len(header) + 50))
    for r in rows:
        rounds = " ".join(f"{s:.1f}" for s in r.samples)
        print(
            f"{r.name:<8} {r.bytes / 1e9:>6.2f} {r.seconds:>7.2f} {r.mb_s:>7.0f} "
            f"{fmt_ratio(ratio(r.mb_s, http.mb_s)):>7}  {rounds:<8}  {r.what}"
        )
    print()


def run(args: argparse.Namespace) -> int:
    machine = common.machine_info()
    common.print_machine(machine)
    repo_dir = ensure_model(args.model)
    work = scratch_dir("pull-bench-")
    try:
        with hub_process(args.model) as (endpoint, repo_id):
            files, cache_peak, cache_after = selected_files(endpoint, repo_id, work)
            size = sum(f.size for f in files)
            print(
                f"model: {repo_id} served by LocalHub (own process) at {endpoint} | "
                f"{len(files)} files, {size / 1e9:.2f} GB | {args.workers} download workers | "
                f"rounds {args.rounds}{' | quick' if args.quick else ''}\n"
                f"local download cache during the service pull: peak {cache_peak / 1e9:.2f} GB, "
                f"after {cache_after / 1e6:.1f} MB",
                flush=True,
            )
            methods: dict[str, Callable[[Path], int]] = {
                "service": lambda d: service_pull(endpoint, repo_id, d, args.workers),
                "http": lambda d: http_get(endpoint, repo_id, files, d),
                "copy": lambda d: raw_copy(repo_dir, files, d),
            }
            samples: dict[str, list[float]] = {name: [] for name in methods}
            for round_index in range(args.rounds):
                for name, transfer in methods.items():
                    seconds, moved = timed(transfer, work / f"{name}-{round_index}")
                    if moved != size:
                        raise RuntimeError(f"{name} moved {moved} bytes, expected {size}")
                    samples[name].append(seconds)
                    print(
                        f"  round {round_index + 1}/{args.rounds} {name:<8} {seconds:6.2f} s "
                        f"{size / seconds / 1e6:7.0f} MB/s",
                        flush=True,
                    )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    what = {
        "service": f"imagegen.model.hub.download_to_share ({args.workers} workers, cache + share)",
        "http": "urllib GET per file, one stream, to a file",
        "copy": "shutil.copyfile per file, no network",
    }
    rows = [Row(n, what[n], size, min(s), s) for n, s in samples.items()]
    service, http, copy = rows
    print_table(rows, http)
    summary = (
        f"summary: {args.model} cold pull {size / 1e9:.2f} GB on loopback: service "
        f"{service.mb_s:.0f} MB/s = {fmt_ratio(ratio(service.mb_s, http.mb_s))} raw HTTP "
        f"({http.mb_s:.0f} MB/s), {fmt_ratio(ratio(service.mb_s, copy.mb_s))} raw copy "
        f"({copy.mb_s:.0f} MB/s); local cache peak {cache_peak / 1e9:.2f} GB"
    )
    document: dict[str, Any] = {
        "machine": machine | {"load_average_at_end": common.load_average()},
        "config": {
            "model": args.model, "rounds": args.rounds, "workers": args.workers,
            "quick": args.quick, "files": [asdict(f) for f in files], "bytes": size,
        },
        "results": [asdict(r) | {"mb_s": r.mb_s} for r in rows],
        "local_cache": {"peak_bytes": cache_peak, "after_bytes": cache_after},
        "ratios": {
            "service_vs_http": ratio(service.mb_s, http.mb_s),
            "service_vs_copy": ratio(service.mb_s, copy.mb_s),
        },
        "summary": summary,
    }  # fmt: skip
    written = common.write_json(f"pull_{args.model}", document, args.json)
    print(f"results written to {written}")
    print(summary)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    common.install_signal_handlers()
    try:
        return run(args)
    except common.Interrupted:
        print("\ninterrupted; temp files and the hub process were cleaned up", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
