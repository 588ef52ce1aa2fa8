"""Models by name in distributed mode, with real parts: one redis-server and two Celery workers
(`manage.py run_worker`) on one share holding the tiny SD model (MODEL_ID) and the tiny SDXL
one (MODELS), each worker with room for one model at a time (MODEL_MEMORY_LIMIT); the web
replica is served in this process (replica_here). w0 may run both, w1 is pinned to SDXL
(WORKER_MODELS); a third offered model, which neither may run, is refused at submit. The stack
is this module's own: the session's shared stack offers one model on one unpinned worker.

The claim applies queue_policy.pick: a job runs on an idle worker holding its model, never
waiting for a swap while one is; a job whose model no idle worker holds is taken by an idle
worker, which swaps; each worker counts its loads and swaps by model in its record, which
GET /model/status lists with what it holds and may run."""

import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest
import redis
import requests

from tests.support.commands import run_command
from tests.support.distributed import Stack
from tests.support.in_process import LoopbackApp
from tests.support.jobs import FINISHED
from tests.support.local_hub import LocalHub
from tests.support.model_service import (
    SD_INPAINT_REPO,
    SD_REPO,
    SDXL_REPO,
    model_service_env,
    pull_until_ready,
)
from tests.support.processes import free_port

SHORT = {"prompt": "a red cube", "seed": "7", "steps": "2", "size": "64x64"}
LONG = {**SHORT, "steps": "500", "size": "256x256"}  # runs until cancelled


@pytest.fixture(scope="module")
def stack(hub_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("models-distributed")
    with LocalHub(hub_root) as hub:
        env = {
            **model_service_env(hub.url, work / "share", work),
            "MODELS": f"{SDXL_REPO},{SD_INPAINT_REPO}",
            "MODEL_MEMORY_LIMIT": "1",  # one model resident per worker: a second one swaps
            "GEN_MAX_STEPS": "500",
        }
        with Stack(env, work) as running:
            running.start(replicas=0, workers=0)
            pinned = {0: f"{SD_REPO},tiny-sdxl", 1: "tiny-sdxl"}  # nobody runs the inpainting one
            ports = {0: {"WORKER_METRICS_PORT": str(free_port())}, 1: {}}  # w0's loads and swaps
            launched = [
                running.launch_worker(n, WORKER_MODELS=m, **ports[n]) for n, m in pinned.items()
            ]
            for worker in launched:
                worker.wait_ready()
            running.metrics_url = f"http://127.0.0.1:{ports[0]['WORKER_METRICS_PORT']}/metrics"
            yield running


@pytest.fixture(scope="module")
def web(stack: Stack) -> Iterator[LoopbackApp]:
    """A web replica here, both models pulled through it: w0 loads SD then swaps for SDXL, w1
    loads SDXL."""
    from tests.support.distributed import replica_here

    with replica_here(**stack.env) as replica:
        pull_until_ready(replica, timeout=180)
        pulled = requests.post(replica.url("/model/pull"), data={"model": SDXL_REPO}, timeout=30)
        assert pulled.status_code in (200, 202), pulled.text
        until(lambda: holding(replica) == {"w0": [SDXL_REPO], "w1": [SDXL_REPO]}, 180)
        yield replica


def status(app: LoopbackApp) -> dict:
    return requests.get(app.url("/model/status"), timeout=30).json()


def workers(app: LoopbackApp) -> dict[str, dict]:
    return {w["name"]: w for w in status(app)["workers"]}


def holding(app: LoopbackApp) -> dict[str, list[str]]:
    return {name: w["models"] for name, w in workers(app).items()}


def until(condition: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.05)


def submit(app: LoopbackApp, model: str, fields: dict[str, str] = SHORT) -> str:
    made = requests.post(
        app.url("/generate"), data={**fields, "model": model, "async": "true"}, timeout=60
    )
    assert made.status_code == 202, made.text
    return made.json()["id"]


def job(app: LoopbackApp, job_id: str) -> dict:
    return requests.get(app.url(f"/jobs/{job_id}"), timeout=30).json()


def ran_on(stack: Stack, app: LoopbackApp, job_id: str) -> str:
    """The worker that ran the finished job (it succeeded)."""
    until(lambda: job(app, job_id)["state"] in FINISHED)
    assert job(app, job_id)["state"] == "succeeded", job(app, job_id)
    worker = stack.redis.client().hget(f"imagegen:job:{job_id}", "worker")
    assert worker is not None
    return worker.decode()


def both_idle(stack: Stack) -> None:
    """Both workers waiting for work, as the claim reads them."""
    client: redis.Redis = stack.redis.client()
    until(lambda: client.smembers("imagegen:idle") == {b"w0", b"w1"})


def running_on(app: LoopbackApp, job_id: str, worker: str) -> None:
    until(lambda: job(app, job_id)["state"] == "running" and workers(app)[worker]["job"] == job_id)


def queued_seconds(record: dict) -> float:
    started, created = (datetime.fromisoformat(record[k]) for k in ("started_at", "created_at"))
    return (started - created).total_seconds()


def counted(scraped: str, family: str, model: str) -> float:
    """A counter's value for `model` in a Prometheus text page (0 when absent)."""
    prefix = f'{family}{{model="{model}"}} '
    return next((float(line[len(prefix) :]) for line in scraped.splitlines()
                 if line.startswith(prefix)), 0.0)  # fmt: skip


def cancel(app: LoopbackApp, job_id: str) -> None:
    requests.delete(app.url(f"/jobs/{job_id}"), timeout=30)
    until(lambda: job(app, job_id)["state"] in FINISHED)


def test_no_job_waits_for_a_swap_while_a_worker_holding_its_model_is_idle(stack, web):
    """A mix of jobs for the two models, each submitted with both workers idle: each runs on
    the worker holding its model, and no worker loads anything (w0 may run SDXL too: under a
    claim of the queue's head alone, whichever worker the message woke would take it, and swap).
    Then, with w1 busy, an SDXL job is taken by idle w0, which swaps, and an SD job swaps it
    back: both swaps counted in w0's record, by model."""
    both_idle(stack)
    assert ran_on(stack, web, submit(web, "tiny-sd")) == "w0"  # w0 swaps back to SD for it
    until(lambda: holding(web) == {"w0": [SD_REPO], "w1": [SDXL_REPO]})
    before = workers(web)
    ran, waited = [], []
    for model in (SDXL_REPO, SD_REPO, SDXL_REPO, SDXL_REPO, SD_REPO, SDXL_REPO):
        both_idle(stack)
        job_id = submit(web, model)
        ran.append((model, ran_on(stack, web, job_id)))
        waited.append(queued_seconds(job(web, job_id)))
    assert ran == [(m, "w1" if m == SDXL_REPO else "w0") for m, _ in ran]
    # A message that woke w0 for an SDXL job is sent on at once, so w1 takes it in a moment, not
    # after the 3 beats (3 s or more) in which an idle worker finds a job left without one. Each
    # job's own wait: a sum over the mix would count the machine's load too.
    assert max(waited) < 3.0, waited
    after = workers(web)
    for name in ("w0", "w1"):
        assert after[name]["loads"] == before[name]["loads"], (before, after)
        assert after[name]["swaps"] == before[name]["swaps"], (before, after)

    both_idle(stack)
    long = submit(web, SDXL_REPO, LONG)
    running_on(web, long, "w1")  # the idle worker holding SDXL took it
    assert ran_on(stack, web, submit(web, SDXL_REPO)) == "w0"  # w1 busy: w0 swaps for it
    assert ran_on(stack, web, submit(web, SD_REPO)) == "w0"  # and back
    cancel(web, long)
    swapped = workers(web)["w0"]
    for model in (SD_REPO, SDXL_REPO):
        assert swapped["loads"][model] == before["w0"]["loads"][model] + 1, swapped
        assert swapped["swaps"][model] == before["w0"]["swaps"].get(model, 0) + 1, swapped
    scraped = requests.get(stack.metrics_url, timeout=30).text  # w0's own metrics port
    for model in (SDXL_REPO, SD_REPO):
        assert counted(scraped, "imagegen_model_swaps_total", model) == swapped["swaps"][model]
        assert counted(scraped, "imagegen_model_loads_total", model) == swapped["loads"][model]


def test_a_pinned_worker_never_takes_another_models_job(stack, web):
    """w0 busy with a long SD job: the next SD job waits, w1 idle beside it (WORKER_MODELS
    pins w1 to SDXL), past the beats after which an idle worker takes a job left waiting; it
    runs on w0 once the long job ends."""
    both_idle(stack)
    long = submit(web, SD_REPO, LONG)
    running_on(web, long, "w0")
    waiting = submit(web, SD_REPO)
    time.sleep(5)  # a message, its resends, and RESCUE_BEATS beats of idle w1
    assert job(web, waiting)["state"] == "queued"
    assert workers(web)["w1"]["job"] is None
    # Each model's list of unfinished jobs, which KEDA scales that model's pool on.
    client = stack.redis.client()
    listed = client.lrange(f"imagegen:unfinished:{SD_REPO}", 0, -1)
    assert listed == [long.encode(), waiting.encode()]
    assert client.llen(f"imagegen:unfinished:{SDXL_REPO}") == 0
    cancel(web, long)
    assert ran_on(stack, web, waiting) == "w0"
    assert client.llen(f"imagegen:unfinished:{SD_REPO}") == 0


def test_a_model_no_live_worker_may_run_is_refused_at_submit(web):
    """The inpainting checkpoint is offered (MODELS) but neither worker's WORKER_MODELS names
    it: a 503 naming the model and the rule, nothing queued; before the share's 409."""
    before = requests.get(web.url("/jobs"), timeout=30).json()
    refused = requests.post(
        web.url("/generate"), data={**SHORT, "model": SD_INPAINT_REPO}, timeout=60
    )
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["message"] == (
        f"No live worker may run the model {SD_INPAINT_REPO}: the WORKER_MODELS of every live "
        "worker (w0, w1) leaves it out; start a worker whose WORKER_MODELS names it (or leaves "
        "WORKER_MODELS unset)"
    )
    assert requests.get(web.url("/jobs"), timeout=30).json() == before


def test_status_says_what_each_worker_holds_and_may_run(web):
    """Per worker: its name, the models it holds and its WORKER_MODELS; each offered model's
    state as the workers that may run it hold it."""
    found = workers(web)
    assert found["w0"]["worker_models"] == [SD_REPO, SDXL_REPO]
    assert found["w1"]["worker_models"] == [SDXL_REPO]
    assert len(found["w0"]["models"]) == 1 and found["w1"]["models"] == [SDXL_REPO]
    models = {m["id"]: m for m in status(web)["models"]}
    assert models[SDXL_REPO]["state"] == "ready" and models[SDXL_REPO]["resident"]
    assert models[SD_INPAINT_REPO]["state"] == "not_started"


def test_a_worker_models_name_that_is_no_offered_model_stops_the_start():
    """The command's own check, run in this process (tests/support/commands.py): no worker
    starts that could never take a job."""
    done = run_command(
        "run_worker",
        env={
            "JOB_BROKER_URL": "redis://127.0.0.1:9/0", "MODEL_ID": SD_REPO, "MODELS": SDXL_REPO,
            "WORKER_MODELS": "tiny-sdxl,tiny-sd-turbo",
        },
    )  # fmt: skip
    assert done.returncode != 0
    assert (
        f"WORKER_MODELS: 'tiny-sd-turbo' is not offered; offered: {SD_REPO}, {SDXL_REPO}"
        in done.stderr
    ), done.stderr


def test_the_real_clients_list_and_choose_models_in_distributed_mode(stack, web):
    """The openai SDK's models.list, images.generate(model=...) and images.edit(model=...),
    webuiapi's get_sd_models,
    util_set_model, util_get_current_model and txt2img with override_settings: each request
    runs on a worker as the model it names, and says so."""
    import base64

    import webuiapi

    from tests.support.in_process import openai_client

    sdk = openai_client(api_key="unused", max_retries=0)
    assert [m.id for m in sdk.models.list()] == [SD_REPO, SDXL_REPO, SD_INPAINT_REPO]
    made = sdk.images.generate(
        model="tiny-sdxl", prompt="a red cube", size="64x64", extra_body={"seed": 7, "steps": 2}
    )
    assert base64.b64decode(made.data[0].b64_json).startswith(b"\x89PNG")
    newest = requests.get(web.url("/jobs"), params={"limit": 1}, timeout=30).json()[0]
    assert newest["image"]["parameters"]["model_id"] == SDXL_REPO
    picture = base64.b64decode(made.data[0].b64_json)
    edited = sdk.images.edit(
        model="tiny-sdxl", image=("in.png", picture, "image/png"), prompt="a blue cube",
        size="64x64", extra_body={"seed": 7, "steps": 2},
    )  # fmt: skip
    assert base64.b64decode(edited.data[0].b64_json).startswith(b"\x89PNG")
    newest = requests.get(web.url("/jobs"), params={"limit": 1}, timeout=30).json()[0]
    assert newest["image"]["parameters"]["model_id"] == SDXL_REPO
    assert "edit" in newest["image"]["parameters"]
    a1111 = webuiapi.WebUIApi(baseurl=web.url("/sdapi/v1"))
    assert [m["title"] for m in a1111.get_sd_models()] == [SD_REPO, SDXL_REPO, SD_INPAINT_REPO]
    a1111.util_set_model("tiny-sdxl")
    a1111.util_wait_for_ready()
    assert a1111.util_get_current_model() == SDXL_REPO
    chosen = a1111.txt2img(prompt="a red cube", seed=7, steps=2, width=64, height=64)
    assert chosen.info["sd_model_name"] == SDXL_REPO
    overridden = a1111.txt2img(
        prompt="a red cube", seed=7, steps=2, width=64, height=64,
        override_settings={"sd_model_checkpoint": SD_REPO},
    )  # fmt: skip
    assert overridden.info["sd_model_name"] == SD_REPO
    a1111.util_set_model(SD_REPO)  # the service's choice back, for the module's other tests
