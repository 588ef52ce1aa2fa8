"""GET /metrics, X-Request-ID and LOG_FORMAT=json end to end in distributed mode (a web replica
under gunicorn with a token, and a worker on a real redis-server), each scrape parsed by
prometheus_client's own parser and each log line as JSON. The in-process mode's families and
its JSON log lines are held in process (test_metrics.py, tests/core/test_request_ids.py)."""

import json
import time
from pathlib import Path

import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.support.distributed import Stack
from tests.support.local_hub import LocalHub
from tests.support.model_service import PULL_TIMEOUT, model_service_env, wait_for_state
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


def test_a_worker_serves_its_metrics_and_a_replica_the_shared_queue_behind_its_token(
    hub_root, tmp_path
):
    port = free_port()
    with LocalHub(hub_root) as hub:
        env = {
            **model_service_env(hub.url, tmp_path / "share", tmp_path),
            "LOG_FORMAT": "json",
            "API_TOKEN": TOKEN,
        }
        with Stack(env, tmp_path) as stack, requests.Session() as http:
            http.headers.update(AUTH)
            stack.start(replicas=1, workers=0)
            worker = stack.add_worker(0, WORKER_METRICS_PORT=str(port))
            app = stack.apps[0]
            assert requests.get(app.url("/metrics")).status_code == 401
            wrong = {"Authorization": "Bearer no"}
            assert requests.get(app.url("/metrics"), headers=wrong).status_code == 401
            assert http.post(app.url("/model/pull")).status_code in (200, 202)
            assert wait_for_state(app, {"ready"}, PULL_TIMEOUT["distributed"])

            long = http.post(
                app.url("/generate"),
                data={"prompt": "long", "size": "128x128", "steps": "100", "async": "true"},
            ).json()
            deadline = time.monotonic() + 120
            while http.get(app.url(f"/jobs/{long['id']}")).json()["progress"]["step"] < 1:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            submitted = http.post(
                app.url("/generate"), headers={"X-Request-ID": "through-the-worker"},
                data={"prompt": "short", "size": "64x64", "steps": "3", "async": "true"},
            )  # fmt: skip
            assert submitted.status_code == 202, submitted.text
            assert submitted.headers["X-Request-ID"] == "through-the-worker"
            short = submitted.json()
            web = parsed(http.get(app.url("/metrics")).text)
            assert web[("imagegen_jobs_queued", frozenset())] == 1  # read from Redis
            assert web[("imagegen_jobs_running", frozenset())] == 1
            view = frozenset({("method", "POST"), ("status", "202"), ("view", "/generate")})
            assert web[("django_http_responses_total_by_status_view_method_total", view)] == 2
            busy = parsed(requests.get(f"http://127.0.0.1:{port}/metrics").text)
            assert busy[("imagegen_worker_busy", frozenset())] == 1

            http.delete(app.url(f"/jobs/{long['id']}"))
            assert wait_job(app.base_url, short["id"], AUTH)["state"] == "succeeded"
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
            # The replica's own line for that request, as JSON, under gunicorn.
            mine = [line for line in json_lines(app.log_path)
                    if line.get("request_id") == "through-the-worker"]  # fmt: skip
            ended = [line for line in mine if line["logger"] == "config.requests"]
            assert len(ended) == 1, mine
            assert ended[0]["route"] == "/generate" and ended[0]["status"] == 202
            assert ended[0]["duration"] > 0 and ended[0]["level"] == "INFO" and ended[0]["time"]

            # docs/configuration.md: a port already taken stops the worker's start, saying
            # so, and no worker is listed for it.
            taken = stack.launch_worker(1, WORKER_METRICS_PORT=str(port))
            assert taken.process is not None and taken.process.wait(120) != 0
            assert f"WORKER_METRICS_PORT: cannot listen on port {port}" in taken.log_tail()
            assert not stack.redis.client().exists("imagegen:worker:w1")
