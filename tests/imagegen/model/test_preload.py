"""The model-loading code is imported when the worker starts, so a load imports (almost)
nothing: imports hold the GIL for up to 200 ms each and stalled /health during loads."""

import json
import re
import subprocess
import sys

import requests

from tests.support.distributed import WorkerProcess
from tests.support.model_service import SD_REPO, SDXL_REPO, pull_until_ready
from tests.support.processes import ROOT

# The preload's log line: what the start made, frozen (imagegen/model/preload.py).
FROZEN = re.compile(rb"model-loading code imported in [0-9.]+ s; ([0-9]+) objects frozen")

# Packages whose import during a load stalled /health (bench/overhead_bench.py).
HEAVY = ("sympy", "accelerate", "transformers", "torch._dynamo", "diffusers.pipelines",
         "diffusers.models", "diffusers.guiders")  # fmt: skip

# One process: the modules the preload imports, then the modules a load of each repo imports
# after it (the load's module imported first, as the worker has it).
PRELOAD_THEN_LOAD = """
import json, sys
from pathlib import Path
from imagegen.model.pipeline import load_pipeline
from imagegen.model.preload import import_loading_code
before = set(sys.modules)
import_loading_code()
preloaded = set(sys.modules)
for repo in sys.argv[1:]:
    load_pipeline(Path(repo), variant="fp16", device="cpu")
print(json.dumps([sorted(preloaded - before), sorted(set(sys.modules) - preloaded)]))
"""


def imports_of_preload_then_load(hub_root) -> tuple[list[str], list[str]]:
    repos = [str(hub_root / SD_REPO), str(hub_root / SDXL_REPO)]
    run = subprocess.run(
        [sys.executable, "-c", PRELOAD_THEN_LOAD, *repos],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    preloaded, loaded = json.loads(run.stdout.splitlines()[-1])
    return preloaded, loaded


# One process started as a worker: the preload (which freezes), then a model loaded and dropped.
FREEZE_THEN_LOAD = """
import gc, json, sys, weakref
from pathlib import Path
from imagegen.model.pipeline import load_pipeline
from imagegen.model.preload import import_loading_code
import_loading_code()
walked, frozen = len(gc.get_objects()), gc.get_freeze_count()
pipeline = load_pipeline(Path(sys.argv[1]), variant="fp16", device="cpu")
unet = weakref.ref(pipeline.unet)
del pipeline
gc.collect()
print(json.dumps([walked, frozen, unet() is None]))
"""


def frozen_in(log: bytes) -> int:
    found = FROZEN.search(log)
    assert found, log[-2000:]
    return int(found.group(1))


def heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if m.startswith(HEAVY)]


def test_after_the_preload_a_load_of_sd_or_sdxl_imports_no_heavy_module(hub_root):
    """The heavy modules are not imported with the load's own module: the preload imports
    them (what it exists for), and a load after it imports none."""
    preloaded, after = imports_of_preload_then_load(hub_root)
    assert len(heavy(preloaded)) > 500
    assert heavy(after) == []
    assert len(after) < 20, after  # a few scheduler modules at most


def test_a_service_with_the_preload_on_pulls_and_generates(start_app):
    app = start_app(PRELOAD_MODEL_CODE="1")
    # In process: the web process imported the loading code and froze what its start made.
    assert frozen_in(app.log_tail(200).encode()) > 200_000
    pull_until_ready(app)
    response = requests.post(app.url("/generate"), data={"prompt": "a boat", "seed": "1"})
    assert response.status_code == 200 and response.content.startswith(b"\x89PNG")


def test_what_the_start_imported_is_frozen_and_a_model_loaded_after_it_is_still_freed(hub_root):
    """A full collection (after a cancelled job, a freed model) walks what came after the
    start, not its imports; a model loaded later is not frozen: dropped, it is collected."""
    run = subprocess.run(
        [sys.executable, "-c", FREEZE_THEN_LOAD, str(hub_root / SD_REPO)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    walked, frozen, freed = json.loads(run.stdout.splitlines()[-1])
    assert frozen > 200_000 and walked * 20 < frozen, (walked, frozen)
    assert freed


def test_a_distributed_worker_with_the_preload_on_freezes_its_start_before_taking_jobs(
    redis_server, model_env, tmp_path
):
    env = {**model_env, "JOB_BROKER_URL": redis_server.url, "PRELOAD_MODEL_CODE": "1"}
    worker = WorkerProcess(env, tmp_path / "worker.log", "w-preload")
    try:
        worker.start(timeout=120)
        assert frozen_in(worker.log()) > 200_000
    finally:
        worker.stop()
