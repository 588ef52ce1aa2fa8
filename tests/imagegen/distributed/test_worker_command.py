"""`manage.py run_worker` outside distributed mode refuses to start, saying why."""

import os
import subprocess
import sys

from tests.support.processes import ROOT


def test_run_worker_without_job_broker_url_refuses_naming_the_setting():
    env = {k: v for k, v in os.environ.items() if k != "JOB_BROKER_URL"}
    done = subprocess.run(
        [sys.executable, "manage.py", "run_worker"],
        cwd=ROOT, env={**env, "SECRET_KEY": "x", "PRELOAD_MODEL_CODE": "0"},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0
    assert "JOB_BROKER_URL is not set" in done.stderr
