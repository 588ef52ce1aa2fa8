"""Webhooks end to end, in both job modes, against the app under gunicorn and a receiver
process that verifies each delivery with the `standardwebhooks` package: it gets exactly the
events of the jobs that named it, every one even when it was down through several tries, each
once from two web replicas (distributed mode), and those a web process killed mid-retry left
pending once a process starts again."""

import base64
import io
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from PIL import Image

from tests.support.jobs import finished, wait_until
from tests.support.model_service import MODES, ready_in_mode
from tests.support.processes import AppServer
from tests.support.webhook_receiver import Receiver
from tests.support.xdist_schedule import stack_of

SECRET = "whsec_" + base64.b64encode(b"receiver-test-secret-32-bytes-ok").decode()
LONG = {"prompt": "a long one", "steps": "400", "size": "64x64"}
ENV = {"GEN_MAX_STEPS": "500", "WEBHOOK_SECRET": SECRET, "WEBHOOK_ALLOW": "127.0.0.1"}


@pytest.fixture(scope="module", params=MODES)
def app(
    request: pytest.FixtureRequest, hub_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AppServer]:
    work = tmp_path_factory.mktemp(f"webhooks-{request.param}")
    with ready_in_mode(request, request.param, hub_root, work, **ENV) as server:
        yield server


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[Receiver]:
    """A receiver on its own port, not started yet."""
    found = Receiver(SECRET, tmp_path / "received.jsonl")
    yield found
    found.close()


def submit(app: AppServer, files: dict | None = None, **fields: str) -> str:
    response = requests.post(
        app.url("/generate"), data={**fields, "async": "true"}, files=files, timeout=30
    )
    assert response.status_code == 202, response.text
    return response.json()["id"]


def picture(size: int = 64) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (size, size), (200, 120, 40)).save(buffer, format="PNG")
    return buffer.getvalue()


def ended(app: AppServer, job_id: str) -> dict:
    return wait_until(app, job_id, finished, timeout=180)


def test_the_receiver_gets_exactly_the_events_of_the_jobs_named_for_it(
    app: AppServer, receiver: Receiver
) -> None:
    receiver.start()
    told = submit(app, prompt="tell me", webhook_url=receiver.url)
    ended(app, told)
    untold = submit(app, prompt="tell nobody")
    ended(app, untold)
    edited = submit(app, {"image": ("in.png", picture(), "image/png")}, prompt="an edit, told",
                    webhook_url=receiver.url)  # fmt: skip
    ended(app, edited)
    stopped = submit(app, **LONG, webhook_url=receiver.url)
    wait_until(app, stopped, lambda j: j["state"] == "running" and j["progress"]["step"] > 0)
    assert requests.delete(app.url(f"/jobs/{stopped}")).status_code == 200
    ended(app, stopped)

    events = receiver.wait_for(3, timeout=60)
    time.sleep(1)  # none more comes: two of the senders' looks (TICK) after the last
    assert receiver.events() == events
    by_job = {event["data"]["id"]: event for event in events}
    assert set(by_job) == {told, edited, stopped}
    assert [by_job[told]["type"], by_job[stopped]["type"]] == ["job.succeeded", "job.cancelled"]
    assert by_job[edited]["type"] == "job.succeeded"
    assert by_job[edited]["data"]["parameters"]["edit"] is not None
    assert re.match(r"^\d{4}-\d\d-\d\dT", by_job[told]["timestamp"])

    # `data` is the job as its route answers it, with a signed link that needs no token.
    data = by_job[told]["data"]
    answer = requests.get(app.url(f"/jobs/{told}")).json()
    assert {k: v for k, v in answer.items() if k != "webhook"} == {
        k: v for k, v in data.items() if k != "image_link"
    }
    assert data["image_link"].startswith(app.base_url + "/v1/images/")
    png = requests.get(data["image_link"], timeout=10)
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG")
    assert by_job[stopped]["data"]["state"] == "cancelled"

    # The job's record says what happened; one without a webhook has none.
    record = wait_until(app, told, lambda j: j["webhook"]["state"] == "delivered")["webhook"]
    assert record["url"] == receiver.url and record["event"] == "job.succeeded"
    assert [t["status"] for t in record["tries"]] == [204]
    assert "webhook" not in requests.get(app.url(f"/jobs/{untold}")).json()
    metrics = requests.get(app.url("/metrics")).text
    assert re.search(r'imagegen_webhook_deliveries_total\{outcome="delivered"\} [1-9]', metrics)
    assert "imagegen_webhook_pending 0.0" in metrics


def test_a_receiver_down_for_several_tries_then_up_gets_every_event(
    app: AppServer, receiver: Receiver
) -> None:
    jobs = [submit(app, prompt=f"while away {n}", webhook_url=receiver.url) for n in range(2)]
    for job_id in jobs:
        ended(app, job_id)
    # Away for two tries (at about 0 and 1 s: 1 s, then doubling); up before the third (3 s).
    record = wait_until(app, jobs[0], lambda j: len(j["webhook"]["tries"]) >= 2)["webhook"]
    assert record["state"] == "pending"
    assert record["tries"][0]["status"] is None and "Connection" in record["tries"][0]["error"]
    metrics = requests.get(app.url("/metrics")).text
    assert re.search(r"imagegen_webhook_retries_total [1-9]", metrics)
    assert re.search(r"imagegen_webhook_pending [1-9]", metrics)

    receiver.start()
    events = receiver.wait_for(2, timeout=60)
    assert sorted(event["data"]["id"] for event in events) == sorted(jobs)
    # Every try carried the same id and the same bytes.
    assert all(d["verified"] for d in receiver.deliveries())
    record = wait_until(app, jobs[0], lambda j: j["webhook"]["state"] == "delivered")["webhook"]
    assert len(record["tries"]) >= 3 and record["tries"][-1]["status"] == 204


@pytest.mark.parametrize("app", ["distributed"], indirect=True)  # replicas: that mode's
def test_two_web_replicas_send_each_event_once(
    app: AppServer, receiver: Receiver, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Distributed mode: every replica notices ended jobs and sends, and the outbox hands each
    event and each try to one of them, even to a receiver slow enough that both replicas look
    for due deliveries while a try is under way."""
    stack = stack_of(request)
    receiver.delay = 1.0  # two of each replica's looks (TICK) while a try is under way
    with stack.replica(tmp_path / "web-b.log", **ENV) as other:
        receiver.start()
        jobs = [
            submit((app, other)[n % 2], prompt=f"two replicas {n}", webhook_url=receiver.url)
            for n in range(4)
        ]
        for job_id in jobs:
            ended(app, job_id)
        events = receiver.wait_for(4, timeout=60)
        time.sleep(2)  # none more comes: four looks of each replica after the last
    assert sorted(event["data"]["id"] for event in events) == sorted(jobs)
    assert len(receiver.deliveries()) == 4  # each sent once, by one replica


def test_a_web_process_killed_with_deliveries_pending_delivers_them_once_restarted(
    app: AppServer, receiver: Receiver
) -> None:
    job_id = submit(app, prompt="across a restart", webhook_url=receiver.url)
    ended(app, job_id)
    wait_until(app, job_id, lambda j: len(j["webhook"]["tries"]) >= 1)
    app.kill()
    receiver.start()
    app.launch().wait_ready()
    [event] = receiver.wait_for(1, timeout=60)
    assert event["data"]["id"] == job_id and event["type"] == "job.succeeded"
