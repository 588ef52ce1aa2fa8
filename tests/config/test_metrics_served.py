"""GET /metrics, X-Request-ID and LOG_FORMAT=json end to end: the app under gunicorn with a
token, and distributed mode (a web replica and a worker on a real redis-server), each scrape
parsed by prometheus_client's own parser and each log line as JSON."""

import json
import time
from pathlib import Path

import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.support.distributed import Stack
from tests.support.local_hub import LocalHub
from tests.support.model_service import PULL_TIMEOUT, model_service_env, pull_until_ready
from tests.support.processes import free_port

TOKEN = "metrics-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def parsed(text: str) -> dict[tuple[str, frozenset], float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def json_lines(path: Path) -> list[dict]:
    """The log's JSON objects (gunicorn's own start-up lines are its text, not ours)."""
    lines = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))  # every line of ours parses, or this fails
    return lines


def wait_job(url: str, job_id: str, headers: dict | None = None) -> dict:
    deadline = time.monotonic() + 120
    while (job := requests.get(f"{url}/jobs/{job_id}", headers=headers).json())["state"] not in (
        "succeeded", "failed", "cancelled",
    ):  # fmt: skip
        assert time.monotonic() < deadline, job
        time.sleep(0.05)
    return job


def test_metrics_need_the_token_and_a_json_log_follows_the_request_id(start_app):
    app = start_app(API_TOKEN=TOKEN, LOG_FORMAT="json")
    assert requests.get(app.url("/metrics")).status_code == 401
    wrong = {"Authorization": "Bearer no"}
    assert requests.get(app.url("/metrics"), headers=wrong).status_code == 401
    assert requests.post(app.url("/model/pull"), headers=AUTH).status_code in (200, 202)
    deadline = time.monotonic() + PULL_TIMEOUT["in-process"]
    while requests.get(app.url("/model/status")).json()["state"] != "ready":
        assert time.monotonic() < deadline
        time.sleep(0.1)

    answer = requests.post(
        app.url("/generate"), data={"prompt": "traced", "size": "64x64", "steps": "2"},
        headers={**AUTH, "X-Request-ID": "trace.me-42"},
    )  # fmt: skip
    assert answer.status_code == 200, answer.text
    assert answer.headers["X-Request-ID"] == "trace.me-42"
    scrape = requests.get(app.url("/metrics"), headers=AUTH)
    assert scrape.status_code == 200
    samples = parsed(scrape.text)
    assert samples[("imagegen_jobs_submitted_total", frozenset({("surface", "native")}))] == 1
    assert samples[("imagegen_jobs_finished_total", frozenset({("outcome", "succeeded")}))] == 1
    assert samples[("imagegen_step_seconds_count", frozenset({("size", "64x64")}))] == 2
    view = frozenset({("method", "POST"), ("status", "200"), ("view", "/generate")})
    assert samples[("django_http_responses_total_by_status_view_method_total", view)] == 1

    mine = [line for line in json_lines(app.log_path) if line.get("request_id") == "trace.me-42"]
    ended = [line for line in mine if line["logger"] == "config.requests"]
    assert len(ended) == 1, mine
    assert ended[0]["route"] == "/generate" and ended[0]["status"] == 200
    assert ended[0]["duration"] > 0 and ended[0]["level"] == "INFO" and ended[0]["time"]


def test_a_worker_serves_its_metrics_and_a_replica_the_shared_queue(hub_root, tmp_path):
    port = free_port()
    with LocalHub(hub_root) as hub:
        env = {**model_service_env(hub.url, tmp_path / "share", tmp_path), "LOG_FORMAT": "json"}
        with Stack(env, tmp_path) as stack:
            stack.start(replicas=1, workers=0)
            worker = stack.add_worker(0, WORKER_METRICS_PORT=str(port))
            app = stack.apps[0]
            pull_until_ready(app, timeout=PULL_TIMEOUT["distributed"])

            long = requests.post(
                app.url("/generate"),
                data={"prompt": "long", "size": "128x128", "steps": "100", "async": "true"},
            ).json()
            deadline = time.monotonic() + 120
            while requests.get(app.url(f"/jobs/{long['id']}")).json()["progress"]["step"] < 1:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            short = requests.post(
                app.url("/generate"), headers={"X-Request-ID": "through-the-worker"},
                data={"prompt": "short", "size": "64x64", "steps": "3", "async": "true"},
            ).json()  # fmt: skip
            web = parsed(requests.get(app.url("/metrics")).text)
            assert web[("imagegen_jobs_queued", frozenset())] == 1  # read from Redis
            assert web[("imagegen_jobs_running", frozenset())] == 1
            busy = parsed(requests.get(f"http://127.0.0.1:{port}/metrics").text)
            assert busy[("imagegen_worker_busy", frozenset())] == 1

            requests.delete(app.url(f"/jobs/{long['id']}"))
            assert wait_job(app.base_url, short["id"])["state"] == "succeeded"
            done = parsed(requests.get(f"http://127.0.0.1:{port}/metrics").text)
            assert done[("imagegen_step_seconds_count", frozenset({("size", "64x64")}))] == 3
            succeeded = frozenset({("outcome", "succeeded")})
            assert done[("imagegen_jobs_finished_total", succeeded)] == 1
            assert done[("imagegen_model_state", frozenset({("state", "ready")}))] == 1
            assert done[("imagegen_worker_busy", frozenset())] == 0

            lines = json_lines(worker.log_path)
            traced = [line for line in lines if line.get("request_id") == "through-the-worker"]
            assert traced, worker.log_tail()
            assert all(line["job_id"] == short["id"] and line["worker"] == "w0" for line in traced)

            # docs/configuration.md: a port already taken stops the worker's start, saying
            # so, and no worker is listed for it.
            taken = stack.launch_worker(1, WORKER_METRICS_PORT=str(port))
            assert taken.process is not None and taken.process.wait(120) != 0
            assert f"WORKER_METRICS_PORT: cannot listen on port {port}" in taken.log_tail()
            assert not stack.redis.client().exists("imagegen:worker:w1")
