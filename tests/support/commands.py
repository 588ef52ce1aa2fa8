"""Runs manage.py commands as real processes, the way an operator does."""

import os
import subprocess
import sys

from tests.support.processes import ROOT


def manage(*args: str, env: dict[str, str] | None = None, timeout: float = 120):
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
