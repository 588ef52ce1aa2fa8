"""DEVICE=auto on a CPU build of torch: the process starts without importing torch."""

import subprocess
import sys

from tests.support.processes import ROOT

PROBE = """
import os, sys
os.environ.update(DJANGO_SETTINGS_MODULE="config.settings", SECRET_KEY="x", DEVICE="auto",
                  PRELOAD_MODEL_CODE="0", MONGODB_URI="mongodb://127.0.0.1:9/unused")
os.environ.pop("JOB_BROKER_URL", None)
from config.wsgi import application
from imagegen.model.device import compute_device
print(compute_device(), "torch" in sys.modules)
"""


def test_auto_on_a_cpu_build_is_cpu_and_the_app_starts_without_importing_torch():
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["cpu", "False"]
