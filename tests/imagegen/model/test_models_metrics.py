"""GET /metrics by model, in process (served_here): loads and swaps counted per model with
their seconds, which models are resident, and the jobs waiting per model. MODEL_ID the tiny
SD model and MODELS the tiny SDXL one, on one share; the scrape parsed by prometheus_client's
own parser. The counters are the process's, so each test reads how far they moved. In
distributed mode a web replica (served here, no worker) reads the jobs waiting per model from
the shared store and reports no residency: it holds no model."""

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.support.distributed import replica_here
from tests.support.in_process import LoopbackApp, served_here
from tests.support.local_hub import LocalHub
from tests.support.model_service import SD_REPO, SDXL_REPO, model_service_env, pull_until_ready

FIELDS = {"prompt": "a red cube", "seed": "7", "steps": "2", "guidance": "5", "size": "64x64"}
FINISHED = ("succeeded", "failed", "cancelled")

Samples = dict[tuple[str, frozenset], float]


@pytest.fixture(scope="module")
def hub_url(hub_root: Path) -> Iterator[str]:
    with LocalHub(hub_root) as hub:
        yield hub.url


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models-metrics")


@pytest.fixture(scope="module")
def app(hub_url: str, work: Path) -> Iterator[LoopbackApp]:
    """Both models on the share and loaded, then room for one: each change of model swaps."""
    env = model_service_env(hub_url, work / "share", work)
    with served_here(**env, MODELS=SDXL_REPO) as served:
        pull_until_ready(served)
        pulled = requests.post(served.url("/model/pull"), data={"model": SDXL_REPO}, timeout=30)
        assert pulled.status_code in (200, 202), pulled.text
        until(lambda: model_states(served)[SDXL_REPO] == "ready")
        assert served.backend is not None and served.backend.shelf is not None
        served.backend.shelf.limit = 1
        for loader in served.backend.shelf.loaders.values():  # none resident, as at a start
            loader.free()
        yield served


def scrape(app: LoopbackApp) -> Samples:
    response = requests.get(app.url("/metrics"), timeout=30)
    assert response.status_code == 200, response.text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def generate(app: LoopbackApp, **fields: str) -> requests.Response:
    return requests.post(app.url("/generate"), data={**FIELDS, **fields}, timeout=120)


def model_states(app: LoopbackApp) -> dict[str, str]:
    status = requests.get(app.url("/model/status"), timeout=30).json()
    return {model["id"]: model["state"] for model in status["models"]}


def until(condition: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.05)


def test_loads_and_swaps_are_counted_by_model_with_their_seconds(app):
    """Room for one: SD loads into an empty process (a load, no swap), SDXL frees it (a
    swap), SD frees SDXL (a swap); the resident gauge follows."""
    before = scrape(app)
    for model in (SD_REPO, SDXL_REPO, SD_REPO):
        made = generate(app, model=model)
        assert made.status_code == 200, made.text
        assert made.headers["X-Model"] == model
    after = scrape(app)

    def moved(name: str, model: str) -> float:
        return value(after, name, model=model) - value(before, name, model=model)

    assert moved("imagegen_model_loads_total", SD_REPO) == 2
    assert moved("imagegen_model_loads_total", SDXL_REPO) == 1
    assert moved("imagegen_model_swaps_total", SD_REPO) == 1
    assert moved("imagegen_model_swaps_total", SDXL_REPO) == 1
    for model in (SD_REPO, SDXL_REPO):
        load_seconds = moved("imagegen_model_load_seconds_total", model)
        assert load_seconds > 0
        assert moved("imagegen_model_swap_seconds_total", model) > 0
    # A swap's seconds are its freeing and its load: SDXL's one load was its one swap.
    assert moved("imagegen_model_swap_seconds_total", SDXL_REPO) >= moved(
        "imagegen_model_load_seconds_total", SDXL_REPO
    )
    assert value(after, "imagegen_model_resident", model=SD_REPO) == 1
    assert value(after, "imagegen_model_resident", model=SDXL_REPO) == 0


def test_jobs_waiting_are_counted_by_the_model_they_name(app):
    """One SD job runs; an SDXL job and an SD job wait behind it, each counted under its
    model (a job naming none waits for MODEL_ID)."""
    long = generate(app, model=SD_REPO, steps="100", size="128x128", **{"async": "true"})
    assert long.status_code == 202, long.text
    job_url = app.url(f"/jobs/{long.json()['id']}")
    until(lambda: requests.get(job_url, timeout=30).json()["progress"]["step"] >= 1)
    waiting = [
        generate(app, model=SDXL_REPO, **{"async": "true"}),
        generate(app, **{"async": "true"}),
    ]
    assert all(w.status_code == 202 for w in waiting), [w.text for w in waiting]
    try:
        samples = scrape(app)
        assert value(samples, "imagegen_model_jobs_queued", model=SDXL_REPO) == 1
        assert value(samples, "imagegen_model_jobs_queued", model=SD_REPO) == 1
        assert value(samples, "imagegen_jobs_queued") == 2
    finally:
        for job_id in [long.json()["id"], *(w.json()["id"] for w in waiting)]:
            requests.delete(app.url(f"/jobs/{job_id}"), timeout=30)
    for job_id in [long.json()["id"], *(w.json()["id"] for w in waiting)]:
        until(lambda j=job_id: requests.get(app.url(f"/jobs/{j}"), timeout=30).json()["state"]
              in FINISHED)  # fmt: skip
    settled = scrape(app)
    assert value(settled, "imagegen_model_jobs_queued", model=SDXL_REPO) == 0
    assert value(settled, "imagegen_model_jobs_queued", model=SD_REPO) == 0


def test_in_distributed_mode_a_replica_counts_the_stores_waiting_jobs_by_model(
    app, hub_url, work, tmp_path, redis_server
):
    """On the in-process app's share (MODEL_ID pulled) and no worker to take the job, it
    waits in Redis: the replica's scrape counts it under MODEL_ID, the other offered model
    at 0, and has no residency family (a web replica holds no model; each worker answers for
    its own)."""
    env = {**model_service_env(hub_url, work / "share", tmp_path), "MODELS": SDXL_REPO}
    with replica_here(**env, JOB_BROKER_URL=redis_server.url) as replica:
        queued = generate(replica, **{"async": "true"})
        assert queued.status_code == 202, queued.text
        samples = scrape(replica)
        assert value(samples, "imagegen_model_jobs_queued", model=SD_REPO) == 1
        assert ("imagegen_model_jobs_queued", frozenset({("model", SDXL_REPO)})) in samples
        assert value(samples, "imagegen_model_jobs_queued", model=SDXL_REPO) == 0
        assert not any(name == "imagegen_model_resident" for name, _ in samples)
