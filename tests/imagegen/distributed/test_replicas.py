"""Distributed mode with real parts: one redis-server, two web replicas under gunicorn on
different ports (A and B) and two Celery worker processes, on the tiny pipeline. Any replica
answers for any job; the queue and its bound are shared; a killed worker's job runs again on
the other worker (found with nobody looking; what a client waiting on a job that loses two
workers is answered: tests/imagegen/distributed/test_lost_worker_answer.py); a worker started
with WARM_START loads from the share (the module's second worker), one started in a killed
one's place waits for a pull, and a web replica started again loads no model; Redis can stop
and start again under the service, for longer than the heartbeat's TTL too, or freeze."""

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from imagegen.errors import JobStoreBusy
from imagegen.generation.images import ImageStore
from tests.support.distributed import Stack, WorkerProcess
from tests.support.jobs import FINISHED, cancel_all, finished, job, wait_until
from tests.support.local_hub import LocalHub
from tests.support.model_service import model_service_env, pull_until_ready

QUEUE_MAX = 2
TTL = 3.0  # JOB_HEARTBEAT_TTL of this stack
STORE_TIMEOUT = 2.0  # JOB_STORE_TIMEOUT_MS of this stack, in seconds
# docs/distributed.md: with the job store frozen a job route answers within twice
# JOB_STORE_TIMEOUT_MS plus two seconds (503 with Retry-After).
BOUND = 2 * (STORE_TIMEOUT + 1)
SLACK = 1.5  # a shared 2-core machine
SYNC_TIMEOUT = 230  # GEN_SYNC_TIMEOUT of this stack
LONG = {"prompt": "a long one", "steps": "400", "size": "64x64"}


@pytest.fixture(scope="module")
def replica_hub(hub_root: Path) -> Iterator[LocalHub]:
    with LocalHub(hub_root) as hub:
        yield hub


@pytest.fixture(scope="module")
def stack(replica_hub: LocalHub, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("replicas")
    env = {
        **model_service_env(replica_hub.url, work / "share", work),
        "GEN_QUEUE_MAX": str(QUEUE_MAX),
        "GEN_MAX_STEPS": "500",
        "JOB_HEARTBEAT_TTL": str(TTL),
        "JOB_STORE_TIMEOUT_MS": str(int(STORE_TIMEOUT * 1000)),
        "GEN_SYNC_TIMEOUT": str(SYNC_TIMEOUT),
        "GEN_SYNC_REFUSE_FACTOR": "0",  # the joined protocol request waits behind long jobs
    }
    with Stack(env, work, persistent=True) as running:
        running.start(replicas=2, workers=1)
        yield running


def pulled(stack: Stack) -> Stack:
    """Every worker of the stack with the model loaded (a pull reaches them all)."""
    status = pull_until_ready(stack.apps[0], timeout=180)
    deadline = time.monotonic() + 120
    while {w["state"] for w in status["workers"]} != {"ready"}:  # all load, not only one
        assert time.monotonic() < deadline, status
        time.sleep(0.2)
        status = requests.get(stack.apps[1].url("/model/status")).json()
    return stack


@dataclass
class WarmStart:
    """What was seen of the module's second worker, started with WARM_START once the first
    had pulled the model: its states until ready, the hub's requests meanwhile, torch mapped."""

    states: list[str]
    became_ready: bool
    hub_requests: list
    maps_torch: bool


@pytest.fixture(scope="module")
def ready(stack: Stack, replica_hub: LocalHub) -> Stack:
    """The model pulled by the first worker; the second, started with WARM_START on the warm
    share, loads it by itself (what it did: test_a_worker_started_warm_loads_from_the_share)."""
    pulled(stack)
    replica_hub.reset_log()
    warm = stack.add_worker(1, WARM_START="1")
    states = []
    deadline = time.monotonic() + 180
    while (state := {w["name"]: w["state"] for w in listed_workers(stack.apps[1])}).get(
        warm.name
    ) != "ready":
        states.append(state.get(warm.name))
        if states[-1] not in (None, "not_started", "loading") or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    stack.warm_start = WarmStart(
        states, state.get(warm.name) == "ready", list(replica_hub.requests),
        maps_torch(warm.process.pid),
    )  # fmt: skip
    return stack


def test_a_worker_started_warm_loads_from_the_share(ready):
    """WARM_START: a worker started on a share that holds the model loads it by itself, from
    the share alone, without any pull."""
    seen: WarmStart = ready.warm_start
    assert set(seen.states) <= {None, "not_started", "loading"}, seen.states
    assert seen.hub_requests == []  # from the share alone, without any pull
    assert seen.became_ready and seen.maps_torch


@pytest.fixture
def a(ready: Stack):
    return ready.apps[0]


@pytest.fixture
def b(ready: Stack):
    return ready.apps[1]


@pytest.fixture(autouse=True)
def idle_queue(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test that uses the stack ends with nothing queued or running."""
    yield
    if "ready" not in request.fixturenames:
        return
    cancel_all(request.getfixturevalue("ready").apps[1], timeout=60)


def submit(app, **fields: str) -> dict:
    response = requests.post(app.url("/generate"), data={**fields, "async": "true"})
    assert response.status_code == 202, response.text
    return response.json()


def listed_workers(app) -> list[dict]:
    """The workers GET /model/status lists."""
    return requests.get(app.url("/model/status")).json()["workers"]


def busy_workers(app) -> dict[str, str]:
    """Worker name -> the job it runs, from GET /model/status."""
    return {w["name"]: w["job"] for w in listed_workers(app) if w["job"]}


def test_a_job_taken_by_a_is_followed_and_cancelled_through_b(a, b):
    taken = submit(a, **LONG)
    seen = wait_until(b, taken["id"], lambda j: j["progress"]["step"] >= 2)
    assert seen["id"] == taken["id"] and seen["parameters"] == taken["parameters"]
    later = wait_until(b, taken["id"], lambda j: j["progress"]["step"] > seen["progress"]["step"])
    assert later["state"] == "running"  # per-step progress, from the worker, read on B
    cancel = requests.delete(b.url(f"/jobs/{taken['id']}"))
    assert cancel.status_code == 200
    final = wait_until(a, taken["id"], finished, timeout=30)
    assert final["state"] == "cancelled" and final["image"] is None
    assert final["progress"]["step"] <= cancel.json()["progress"]["step"] + 1  # at a step end
    again = requests.delete(a.url(f"/jobs/{taken['id']}"))
    assert again.status_code == 409 and "already cancelled" in again.json()["error"]["message"]


def test_two_jobs_run_at_once_the_bound_holds_across_replicas_a_cancel_on_b_holds(a, b):
    """Two jobs run at once, one on each worker; the jobs waiting behind them count against
    one bound whichever replica took them; a queued job cancelled on B never runs."""
    first, second = submit(a, **LONG), submit(b, **LONG)
    deadline = time.monotonic() + 120
    while sorted(busy_workers(a).values()) != sorted([first["id"], second["id"]]):
        assert time.monotonic() < deadline, busy_workers(a)
        time.sleep(0.05)
    both = [job(b, first["id"]), job(b, second["id"])]
    assert [j["state"] for j in both] == ["running", "running"]
    assert len(busy_workers(b)) == 2  # one job on each worker
    waiting = [submit(a, **LONG), submit(b, **LONG)][:QUEUE_MAX]
    assert [job(a, j["id"])["position"] for j in waiting] == [1, 2]
    for app in (a, b):
        refused = requests.post(app.url("/generate"), data={**LONG, "async": "true"})
        assert refused.status_code == 503, refused.text
        assert int(refused.headers["Retry-After"]) > 0
        assert "waiting" in refused.json()["error"]["message"]
    never = waiting[0]
    cancelled = requests.post(b.url(f"/jobs/{never['id']}/cancel"))
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert job(a, waiting[1]["id"])["position"] == 1  # the queue moved up
    for j in (first, second):
        requests.delete(a.url(f"/jobs/{j['id']}"))
    for j in (first, second):
        wait_until(a, j["id"], finished)
    time.sleep(1)  # its message reached a worker by now, which found nothing to run
    final = job(a, never["id"])
    assert final["state"] == "cancelled" and final["started_at"] is None


def test_a_web_replica_killed_and_restarted_loses_nothing_and_never_loads_a_model(
    replica_hub, a, b
):
    """Killed while a job it took runs, it is started again with the service's defaults for
    a web replica (the model code's preload and WARM_START on, as in the image): it answers
    for the job the worker finished meanwhile, fetches nothing from the hub and loads no
    model, not even torch."""
    taken = submit(a, prompt="outlives its replica", steps="30", size="64x64", seed="5")
    a.kill()
    final = wait_until(b, taken["id"], finished)
    assert final["state"] == "succeeded"  # the worker went on without the replica
    replica_hub.reset_log()
    a.env.update(WARM_START="1", PRELOAD_MODEL_CODE="1")
    a.start()
    assert job(a, taken["id"]) == job(b, taken["id"])
    png = requests.get(a.url(final["image_url"]))
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG")
    assert requests.get(a.url("/model/status")).json()["state"] == "ready"
    assert replica_hub.requests == []
    assert not maps_torch(a.process.pid)


def jobs_for(app, prompt: str) -> list[dict]:
    listed = requests.get(app.url("/jobs"), params={"limit": 200}).json()
    return [j for j in listed if j["parameters"]["prompt"] == prompt]


# A protocol's synchronous route, a body for a long job, and where its answer has images. One
# protocol across replicas here: the registry both protocols join through is the same
# (tests/imagegen/distributed/test_shared_runs.py against Redis), and A1111's join of its twin is
# tests/imagegen/api/clients/test_webuiapi_img2img.py's.
PROTOCOLS = {
    "openai": ("/v1/images/generations", {"size": "64x64"}, "data"),
}


def both_workers_busy(a, b) -> list[str]:
    """Two long jobs, one running on each worker: a job submitted now waits, queued."""
    taken = [submit(a, **LONG)["id"], submit(b, **LONG)["id"]]
    deadline = time.monotonic() + 120
    while sorted(busy_workers(a).values()) != sorted(taken):
        assert time.monotonic() < deadline, busy_workers(a)
        time.sleep(0.05)
    return taken


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_identical_protocol_request_on_b_joins_the_job_it_queued_on_a(ready, a, b, protocol):
    """A client's retry that the ingress sends to another replica gets the same image from
    the same job, as it would from the replica that took the first attempt. The job waits
    queued behind both workers' long jobs until the retry has joined it, so its own run is
    short."""
    path, fields, images = PROTOCOLS[protocol]
    body = {"prompt": f"one {protocol} job for both", "steps": 2, "seed": 3, **fields}
    answers: dict[str, requests.Response | Exception] = {}

    def ask(name: str, app) -> None:
        try:
            answers[name] = requests.post(app.url(path), json=body, timeout=120)
        except Exception as error:  # reported by the assertion below, not lost with the thread
            answers[name] = error

    blocking = both_workers_busy(a, b)
    first = threading.Thread(target=ask, args=("a", a))
    first.start()
    deadline = time.monotonic() + 60
    while not (found := jobs_for(b, body["prompt"])) or found[0]["state"] != "queued":
        assert time.monotonic() < deadline, found
        time.sleep(0.02)
    client = ready.redis.client()
    (registered,) = client.keys("imagegen:run:*")
    assert SYNC_TIMEOUT < client.ttl(registered) <= SYNC_TIMEOUT + 60
    token = client.hget(registered, "token").decode()
    twin = threading.Thread(target=ask, args=("b", b))
    twin.start()
    while client.get(f"imagegen:run-waiters:{token}") != b"2":  # the twin joined
        assert time.monotonic() < deadline and twin.is_alive(), answers
        time.sleep(0.02)
    assert job(b, found[0]["id"])["state"] == "queued"  # joined before it ran
    for job_id in blocking:
        requests.delete(a.url(f"/jobs/{job_id}"))
    first.join(120)
    twin.join(120)
    assert all(isinstance(r, requests.Response) for r in answers.values()), answers
    assert answers["a"].status_code == answers["b"].status_code == 200, answers
    assert answers["a"].json()[images] == answers["b"].json()[images]
    assert len(jobs_for(a, body["prompt"])) == 1  # the work was queued once


def stored(ready: Stack, job_id: str) -> dict:
    """The job's hash read from Redis itself: no replica reads it, so none judges it."""
    fields = ready.redis.client().hgetall(f"imagegen:job:{job_id}")
    found = {name.decode(): value.decode() for name, value in fields.items()}
    found["attempts"] = json.loads(found.get("attempts", "[]"))
    return found


def stored_until(ready: Stack, job_id: str, predicate, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while not predicate(current := stored(ready, job_id)):
        assert time.monotonic() < deadline, current
        time.sleep(0.05)
    return current


def kill_its_worker(ready: Stack, job_id: str) -> str:
    """SIGKILL to the worker running the job, once it has made a step; its name."""
    running = stored_until(
        ready, job_id, lambda j: j["state"] == "running" and int(j["step"]) >= 1, timeout=120
    )
    worker = next(w for w in ready.workers if w.name == running["worker"])
    worker.kill()
    ready.workers.remove(worker)
    return worker.name


def all_listed_and_ready(ready: Stack, app, timeout: float = 300) -> None:
    """Every worker of the stack listed by GET /model/status, and every one listed ready."""
    deadline = time.monotonic() + timeout  # processes import and load, on a busy machine
    expected = {w.name for w in ready.workers}
    while True:  # every worker listed (a beat late on a busy machine drops one for a moment)
        status = requests.get(app.url("/model/status")).json()
        listed = {w["name"] for w in status["workers"]}
        if listed >= expected and all(w["state"] == "ready" for w in status["workers"]):
            return
        assert time.monotonic() < deadline, status
        time.sleep(0.1)


def a_new_worker_waits_for_a_pull(ready: Stack, a, late: WorkerProcess) -> None:
    """A worker started after the model was pulled is listed not started, even on a warm
    share, while the deployment can generate (another worker is ready); a pull reaches it,
    and once every worker is ready a pull has nothing left to do."""
    status = requests.get(a.url("/model/status")).json()
    states = {w["name"]: w["state"] for w in status["workers"]}
    assert states[late.name] == "not_started", status
    assert status["state"] == "ready"  # this deployment can generate
    assert status["weights_on_share"] is True
    assert requests.post(a.url("/model/pull")).status_code == 202
    all_listed_and_ready(ready, a)
    assert requests.post(a.url("/model/pull")).status_code == 200  # every worker is ready


def unfinished_ids(ready: Stack) -> list[str]:
    return [i.decode() for i in ready.redis.client().lrange("imagegen:unfinished", 0, -1)]


def test_a_killed_workers_job_runs_again_on_the_other_found_with_nobody_looking(ready, a):
    # Killed at its first step: a short job is long enough, and its second run is short.
    taken = submit(a, prompt="outlives its first worker", steps="120", size="64x64", seed="8")
    first = kill_its_worker(ready, taken["id"])
    killed = time.monotonic()
    # From here no replica reads the job: only the live worker's sweep can find it.
    again = stored_until(ready, taken["id"], lambda j: j["attempts"][0].get("lost_at"), 2 * TTL)
    assert time.monotonic() - killed <= 2 * TTL
    assert again["state"] in ("queued", "running") and taken["id"] in unfinished_ids(ready)
    final = stored_until(ready, taken["id"], lambda j: j["state"] in FINISHED, timeout=180)
    assert final["state"] == "succeeded", final
    runs = [run["worker"] for run in final["attempts"]]
    assert runs[0] == first and len(runs) == 2 and runs[1] in {w.name for w in ready.workers}
    assert taken["id"] not in unfinished_ids(ready)
    images = ImageStore(ready.work / "images").page(limit=500)
    assert [i.parameters.prompt for i in images].count("outlives its first worker") == 1
    assert job(a, taken["id"])["image_url"] == f"/images/{json.loads(final['image'])['id']}.png"
    # A worker started in its place waits for a pull; then the module has two workers again,
    # ready, for the next tests.
    a_new_worker_waits_for_a_pull(ready, a, ready.add_worker(40))


def maps_torch(pid: int) -> bool:
    """Whether the process or any of its children (gunicorn's workers) has torch loaded."""
    pids = [pid, *map(int, Path(f"/proc/{pid}/task/{pid}/children").read_text().split())]
    return any("libtorch" in Path(f"/proc/{p}/maps").read_text() for p in pids)


def test_a_redis_restart_longer_than_the_ttl_fails_no_running_job(ready, a, b):
    """With persistence, a store away for longer than JOB_HEARTBEAT_TTL is no evidence of a
    dead worker: the running job goes on and succeeds. Meanwhile the job routes answer 503
    naming the job store, /health 200; afterwards nothing is lost and the workers take work
    again by themselves."""
    before = submit(a, prompt="kept", steps="3", size="64x64", seed="1")
    done = wait_until(b, before["id"], finished)
    # Long enough to step on through the outage (its writes fail at once meanwhile).
    taken = submit(a, prompt="outlives a redis restart", steps="300", size="64x64", seed="6")
    wait_until(b, taken["id"], lambda j: j["progress"]["step"] >= 1)
    ready.redis.stop()
    stopped_at = time.monotonic()
    try:
        for response in (
            requests.get(a.url(f"/jobs/{before['id']}"), timeout=30),
            requests.get(b.url("/jobs"), timeout=30),
            requests.post(b.url("/generate"), data={"prompt": "x", "async": "true"}, timeout=30),
        ):
            assert response.status_code == 503, response.text
            assert int(response.headers["Retry-After"]) > 0
            assert "job store" in response.json()["error"]["message"]
        assert requests.get(a.url("/health"), timeout=5).status_code == 200
        time.sleep(max(0.0, TTL + 2 - (time.monotonic() - stopped_at)))
    finally:
        ready.redis.start()
    # A step written after the restart: it went on through the outage, and still runs.
    first = int(stored(ready, taken["id"])["step"])
    back = stored_until(
        ready, taken["id"], lambda j: j["state"] != "running" or int(j["step"]) > first, 60
    )
    assert back["state"] == "running", back
    final = wait_until(b, taken["id"], finished, timeout=180)
    assert final["state"] == "succeeded", final
    assert len(stored(ready, taken["id"])["attempts"]) == 1  # never judged lost
    assert job(a, before["id"]) == done  # nothing was lost
    after = requests.post(b.url("/generate"), data={"prompt": "back", "size": "64x64"}, timeout=120)
    assert after.status_code == 200, after.text  # the workers took work again by themselves


def test_a_freeze_past_the_ttl_and_the_bound_fails_nothing_and_every_replica_answers(ready, a, b):
    """Redis stopped with SIGSTOP (a hung store: connections open, nothing answered) for
    longer than JOB_HEARTBEAT_TTL and the answer bound, under both replicas and both
    workers, one of them running a job: job routes on both replicas answer 503 within the
    bound, /health at once on the replica holding more job requests than it has threads,
    /model/status 200 with what it last saw; after the thaw the job goes on and succeeds,
    run once, and both replicas take work again."""
    # Each progress write waits for its call budget while Redis is frozen: a job of a few
    # seconds outlives the freeze.
    taken = submit(a, prompt="outlives a frozen redis", steps="120", size="64x64", seed="9")
    wait_until(b, taken["id"], lambda j: j["progress"]["step"] >= 1)
    threads = int(ready.env.get("GUNICORN_THREADS", "16"))
    answers: list[tuple[requests.Response, float]] = []
    with ready.redis.frozen():
        frozen_at = time.monotonic()
        crowd = [
            threading.Thread(target=lambda: answers.append(timed("GET", a.url("/jobs"))))
            for _ in range(2 * threads)
        ]
        for thread in crowd:
            thread.start()
        time.sleep(0.3)  # the job requests hold what they can of replica A
        health = [timed("GET", a.url("/health")) for _ in range(3)]
        for app in (a, b):
            response, seconds = timed("GET", app.url(f"/jobs/{taken['id']}"))
            assert_unavailable(response, seconds, app.url(""))
        status, status_seconds = timed("GET", b.url("/model/status"))
        for thread in crowd:
            thread.join()
        time.sleep(max(0.0, TTL + 2 - (time.monotonic() - frozen_at)))
    assert stored(ready, taken["id"])["state"] == "running"  # the freeze came while it ran
    assert all(r.status_code == 200 and seconds < 1.0 for r, seconds in health), health
    assert len(answers) == 2 * threads
    for response, seconds in answers:
        assert_unavailable(response, seconds, "GET /jobs on A")
    # JOB_STORE_MAX_CONCURRENT (below the threads) places were all taken: refused at once.
    assert JobStoreBusy.message in {response.json()["error"]["message"] for response, _ in answers}
    assert status.status_code == 200 and status_seconds < BOUND + SLACK, status.text
    assert status.json()["store"] == "unreachable"
    final = wait_until(b, taken["id"], finished, timeout=180)
    assert final["state"] == "succeeded", final
    assert len(stored(ready, taken["id"])["attempts"]) == 1  # never judged lost
    for app in (a, b):
        after = requests.post(app.url("/generate"), data={"prompt": "thawed", "size": "64x64"})
        assert after.status_code == 200, after.text


def timed(method: str, url: str) -> tuple[requests.Response, float]:
    started = time.monotonic()
    response = requests.request(method, url, timeout=60)
    return response, time.monotonic() - started


def assert_unavailable(response: requests.Response, seconds: float, what: str) -> None:
    assert response.status_code == 503, (what, response.text)
    assert int(response.headers["Retry-After"]) > 0, what
    assert seconds < BOUND + SLACK, (what, seconds)
