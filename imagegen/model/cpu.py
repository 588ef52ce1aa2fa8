"""How many CPU threads torch should use: what the container may really use.

torch sizes its pool from os.cpu_count(): the host's count, say 64, not the cgroup quota. 64
threads on a 4-CPU quota are throttled in turns, which costs far more than it gains."""

import math
import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


def cgroup_quota(root: Path = CGROUP) -> float | None:
    """CPUs allowed by the cgroup (v2 `cpu.max`, else v1 CFS quota); None when unlimited."""
    try:
        limit, interval = (root / "cpu.max").read_text().split()
        return None if limit == "max" else int(limit) / int(interval)
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota <= 0 else quota / period
    except (OSError, ValueError):
        return None


def cpu_budget(root: Path = CGROUP) -> int:
    available = len(os.sched_getaffinity(0))
    quota = cgroup_quota(root)
    return available if quota is None else max(1, min(available, math.ceil(quota)))


def torch_threads(setting: str, root: Path = CGROUP) -> int:
    """TORCH_THREADS: "auto" (the CPU budget) or a number."""
    return cpu_budget(root) if setting == "auto" else int(setting)
