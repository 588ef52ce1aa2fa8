"""The benchmarks' one harness: the entry point, the machine/date/commit header, child
processes, statistics, and the JSON results with the summary line. Not a benchmark itself.

Every figure in docs/performance.md names its machine, date and commit, so every run prints
and records them; a figure stands beside a baseline measured in the same run, since this
shared machine moves by a third between runs.

Heavy measurements run in a fresh child process each (`run_child`), so one variant's
allocations, page-ins and thread pools never leak into the next one's figures, and each
child reports its own peak RSS (VmHWM) from /proc/self/status at its end.
"""

from __future__ import annotations

import json
import math
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
GIB = 2**30

# Keeps library chatter (progress bars, advisory warnings) out of the bench output.
QUIET_ENV = {
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "DIFFUSERS_VERBOSITY": "error",
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


class Interrupted(Exception):
    """Raised on SIGINT or SIGTERM so temp dirs and child processes are still cleaned up."""


def raise_interrupted(_signum: int, _frame: object) -> None:
    raise Interrupted()


def install_signal_handlers() -> None:
    # Also when started in the background, where a shell makes SIGINT ignored by default.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, raise_interrupted)


# --- machine ---------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cgroup_cpu_quota() -> str:
    """cgroup v2 cpu.max as "N cpus" or "max" (no quota); "unknown" elsewhere."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
    except (OSError, ValueError):
        return "unknown"
    return "max" if quota == "max" else f"{int(quota) / int(period):g} cpus"


def commit() -> str:
    """The code measured: HEAD's short hash, `+changes` when the tree differs from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
    except OSError:
        return "unknown"
    return (head or "unknown") + ("+changes" if dirty else "")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def machine_info() -> dict[str, Any]:
    return {
        "nproc": os.cpu_count() or 0,
        "cpu": cpu_model(),
        "cgroup_cpu_quota": cgroup_cpu_quota(),
        "mem_total_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_at_start": load_average(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": commit(),
    }


def print_machine(machine: dict[str, Any], extra: str = "") -> None:
    print(
        f"machine: nproc {machine['nproc']} | {machine['cpu']} | cgroup cpu quota "
        f"{machine['cgroup_cpu_quota']} | {machine['mem_total_gib']} GiB | "
        f"python {machine['python']}{' | ' + extra if extra else ''}"
    )
    print(f"run: {machine['date']}, commit {machine['commit']}")
    print(
        f"load average at start: {machine['load_average_at_start']} "
        "(other work on the machine makes every figure noisy; compare ratios)"
    )


# --- memory -------------------------------------------------------------------------------------


def mem_available_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def check_memory(needed: int, force: bool) -> None:
    """Refuses to start a run whose children would need more than the machine has free (an
    OOM kill would also hit whatever else runs here), unless forced."""
    available = mem_available_bytes()
    if needed > available and not force:
        raise SystemExit(
            f"this run needs about {needed / GIB:.1f} GiB and {available / GIB:.1f} GiB is "
            "available; free memory or pass --force"
        )


def prime_size(wanted: int) -> int:
    """What prime_memory may touch: at most half of the memory available now."""
    return min(wanted, mem_available_bytes() // 2)


def prime_memory(nbytes: int) -> float:
    """Writes nbytes once and frees them; returns the seconds it took.

    On a microVM (this machine is Firecracker) the first touch of guest memory the host has
    not backed yet is many times slower than reusing freed memory, which would penalise
    whichever child process runs first; priming first puts every variant on the same
    footing. The service's real first load on a fresh host does pay that cost."""
    started = time.perf_counter()
    block = b"\x01" * nbytes  # one memset: every page is touched
    del block
    return time.perf_counter() - started


def read_files(files: Sequence[Path], chunk: int = 16 * 2**20) -> tuple[float, int]:
    """(seconds, bytes) to read every byte of the files into one reused buffer; also puts
    them in the page cache (a loader may drop them from it, as the service's streaming
    loader does)."""
    buffer = bytearray(chunk)
    view = memoryview(buffer)
    total = 0
    started = time.perf_counter()
    for file in files:
        with Path(file).open("rb", buffering=0) as f:
            while count := f.readinto(view):
                total += count
    return time.perf_counter() - started, total


# --- child processes -------------------------------------------------------------------------


def proc_status_bytes(field: str) -> int:
    """A memory field of /proc/self/status (VmHWM = peak RSS, VmRSS = current), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    return 0


class PeakMemory:
    """Samples this process's RssAnon and RssFile every few ms in a thread and keeps their
    peaks: VmHWM counts file pages mapped from the page cache (safetensors mmaps its files)
    as well as the anonymous memory a loaded model really owns."""

    def __init__(self, interval: float = 0.005) -> None:
        import threading

        self.interval = interval
        self.peaks = {"RssAnon": 0, "RssFile": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-memory", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for field in self.peaks:
                self.peaks[field] = max(self.peaks[field], proc_status_bytes(field))
            self._stop.wait(self.interval)

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join()
        return {
            "peak_anon_bytes": self.peaks["RssAnon"],
            "peak_file_bytes": self.peaks["RssFile"],
        }


def emit_child_result(result: dict[str, Any]) -> None:
    """A child's last stdout line: its result as JSON, with its peak RSS added."""
    result["peak_rss_bytes"] = proc_status_bytes("VmHWM")
    print("RESULT " + json.dumps(result), flush=True)


def run_child(
    script: Path, args: Sequence[str], log_path: Path, timeout: float, env: dict[str, str]
) -> dict[str, Any]:
    """Runs `script --child ...` in a fresh interpreter and returns the result it emitted.

    Its stderr goes to log_path (shown when it fails); it is killed on timeout or when this
    process is interrupted."""
    command = [sys.executable, str(script), "--child", *args]
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            command, cwd=ROOT, env={**os.environ, **QUIET_ENV, **env},
            stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True,
        )  # fmt: skip
        try:
            stdout, _ = process.communicate(timeout=timeout)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    results = [line[7:] for line in stdout.splitlines() if line.startswith("RESULT ")]
    if process.returncode != 0 or not results:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-25:])
        raise RuntimeError(f"child {' '.join(args)} exited with {process.returncode}:\n{tail}")
    return json.loads(results[-1])


# --- statistics and output ---------------------------------------------------------------------


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = min(max(1, math.ceil(fraction * len(ordered))), len(ordered))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def write_json(name: str, document: dict[str, Any], path: Path | None = None) -> Path:
    path = path or RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"benchmark": name, "date": datetime.now(UTC).isoformat(timespec="seconds")}
    path.write_text(json.dumps(body | document, indent=2) + "\n")
    return path


def print_table(columns: Sequence[tuple[str, int]], rows: Sequence[Sequence[str]]) -> None:
    """The run's table: the first column left-aligned, the figures right-aligned to their
    widths, the last column (what each row is) as it comes."""

    def line(cells: Sequence[str]) -> str:
        first, *figures, last = cells
        widths = [width for _, width in columns]
        pairs = zip(figures, widths[1:-1], strict=True)
        middle = " ".join(f"{cell:>{width}}" for cell, width in pairs)
        return f"{first:<{widths[0]}} {middle}  {last}"

    header = line([name for name, _ in columns])
    print()
    print(header)
    print("-" * (len(header) + 40))
    for row in rows:
        print(line(row))
    print()


def finish(
    name: str, machine: dict[str, Any], document: dict[str, Any], summary: str, path: Path | None
) -> Path:
    """Writes the run's JSON (the machine, its load at the end, the summary) and prints where,
    then the one-line `summary:` every benchmark ends with."""
    machine = machine | {"load_average_at_end": load_average()}
    written = write_json(name, {"machine": machine} | document | {"summary": summary}, path)
    print(f"\nresults written to {written}")
    print(summary)
    return written


def main(
    parse_args: Callable[[Sequence[str] | None], Any],
    run: Callable[[Any], int],
    child: Callable[[Any], int] | None = None,
    argv: Sequence[str] | None = None,
) -> int:
    """A benchmark's entry: `--child` runs one measured variant in this fresh process; else the
    run, with SIGINT and SIGTERM raised as Interrupted so temp dirs and children are cleaned."""
    args = parse_args(argv)
    if child is not None and getattr(args, "child", None):
        return child(args)
    install_signal_handlers()
    try:
        return run(args)
    except Interrupted:
        print("\ninterrupted; the processes and temp files were cleaned up", file=sys.stderr)
        return 130


class Stopwatch:
    def __init__(self) -> None:
        self.started = time.monotonic()

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started
