"""The model-loading code is imported when the worker starts, so a load imports (almost)
nothing: imports hold the GIL for up to 200 ms each and stalled /health during loads."""

import json
import subprocess
import sys

import requests

from tests.support.model_service import SD_REPO, SDXL_REPO, pull_until_ready
from tests.support.processes import ROOT

# Packages whose import during a load stalled /health (bench/overhead_bench.py).
HEAVY = ("sympy", "accelerate", "transformers", "torch._dynamo", "diffusers.pipelines",
         "diffusers.models", "diffusers.guiders")  # fmt: skip

LOAD_AND_LIST_IMPORTS = """
import json, sys
from pathlib import Path
if sys.argv[1] == "preload":
    from imagegen.model.preload import import_loading_code
    import_loading_code()
from imagegen.model.pipeline import load_pipeline
before = set(sys.modules)
for repo in sys.argv[2:]:
    load_pipeline(Path(repo), variant="fp16", device="cpu")
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def imports_during_load(hub_root, preload: bool) -> list[str]:
    repos = [str(hub_root / SD_REPO), str(hub_root / SDXL_REPO)]
    run = subprocess.run(
        [sys.executable, "-c", LOAD_AND_LIST_IMPORTS, "preload" if preload else "-", *repos],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    return json.loads(run.stdout.splitlines()[-1])


def heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if m.startswith(HEAVY)]


def test_after_the_preload_a_load_of_sd_or_sdxl_imports_no_heavy_module(hub_root):
    without = imports_during_load(hub_root, preload=False)
    assert len(heavy(without)) > 500  # what the preload exists for
    after = imports_during_load(hub_root, preload=True)
    assert heavy(after) == []
    assert len(after) < 20, after  # a few scheduler modules at most


def test_a_service_with_the_preload_on_pulls_and_generates(start_app):
    app = start_app(PRELOAD_MODEL_CODE="1")
    assert "model-loading code imported in" in app.log_tail(200)
    pull_until_ready(app)
    response = requests.post(app.url("/generate"), data={"prompt": "a boat", "seed": "1"})
    assert response.status_code == 200 and response.content.startswith(b"\x89PNG")
