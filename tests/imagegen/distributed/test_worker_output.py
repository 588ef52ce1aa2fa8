"""A worker's own output: what libraries write to stderr while it works (the progress bars of
a model's load) stays plain output, as in the web process, and is not logged as Celery's
`WARNING celery.redirected` lines, which read as trouble."""

import time
from pathlib import Path

import requests

from tests.support.distributed import Stack
from tests.support.local_hub import LocalHub
from tests.support.model_service import model_service_env


def test_a_workers_progress_bars_are_not_logged_as_warnings(hub_root: Path, tmp_path: Path):
    with (
        LocalHub(hub_root) as hub,
        Stack(model_service_env(hub.url, tmp_path / "share", tmp_path), tmp_path) as stack,
    ):
        stack.start(replicas=1, workers=1)
        app, worker = stack.apps[0], stack.workers[0]
        # The pull reaches the running worker, which loads the model under Celery's worker.
        assert requests.post(app.url("/model/pull"), timeout=10).status_code == 202
        deadline = time.monotonic() + 120
        while requests.get(app.url("/model/status"), timeout=10).json()["state"] != "ready":
            assert time.monotonic() < deadline, worker.log_tail()
            time.sleep(0.2)
        log = worker.log().decode(errors="replace")
    assert "Loading pipeline components" in log, log  # the load's bar, written as it was
    assert "celery.redirected" not in log, log
