"""Asynchronous jobs end to end on the tiny pipeline: queue positions, real progress,
cancelling the right job, overflow, and the stored image records."""

import hashlib
import io
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
from PIL import Image

from tests.support.in_process import Served, ready_in_either_mode
from tests.support.jobs import cancel_all, finished, job, wait_until
from tests.support.model_service import MODES, SD_REPO

QUEUE_MAX = 3
LONG = {"prompt": "a long one", "steps": "400", "size": "128x128"}  # seconds on any machine
# Seconds a synchronous request waits here: past it, the 504 test's long job; well within it,
# every other synchronous generation of the module (a tiny 64x64 image in 2 steps).
SYNC_TIMEOUT = 5


@pytest.fixture(scope="module", params=MODES)
def app(
    request: pytest.FixtureRequest, hub_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """Every test here runs in both modes: in process (served from this process, no gunicorn),
    and distributed (a web replica of these settings on the session's shared Redis and
    worker)."""
    env = {
        "GEN_QUEUE_MAX": str(QUEUE_MAX),
        "GEN_MAX_STEPS": "500",
        "GEN_SYNC_TIMEOUT": str(SYNC_TIMEOUT),
        # The 504 test's synchronous job is long on purpose: taken whatever its estimate (the
        # refusal of such a request at once: test_estimates.py, test_generate.py).
        "GEN_SYNC_REFUSE_FACTOR": "0",
    }
    work = tmp_path_factory.mktemp(f"jobs-{request.param}")
    with ready_in_either_mode(request, request.param, hub_root, work, **env) as server:
        yield server


@pytest.fixture(autouse=True)
def idle_queue(app: Served) -> Iterator[None]:
    """Each test starts and ends with no job queued or running."""
    yield
    cancel_all(app)


def submit(app: Served, **fields: str) -> dict:
    started = time.monotonic()
    response = requests.post(app.url("/generate"), data={**fields, "async": "true"})
    assert time.monotonic() - started < 2  # no request waits for a generation
    assert response.status_code == 202, response.text
    assert response.headers["Location"] == f"/jobs/{response.json()['id']}"
    return response.json()


def test_jobs_advance_through_positions_and_real_progress_to_succeeded(app):
    jobs = [submit(app, prompt=f"job {i}", steps="10", size="64x64", seed=str(i)) for i in range(3)]
    assert [j["parameters"]["seed"] for j in jobs] == [0, 1, 2]

    history: dict[str, list[dict]] = {j["id"]: [] for j in jobs}
    deadline = time.monotonic() + 120
    while True:
        for job_id, seen in history.items():
            seen.append(job(app, job_id))
        if all(finished(seen[-1]) for seen in history.values()):
            break
        assert time.monotonic() < deadline
        time.sleep(0.02)

    for seen in history.values():
        states = [s["state"] for s in seen]
        assert states[-1] == "succeeded"
        order = ["queued", "running", "succeeded"]
        assert [order.index(s) for s in states] == sorted(order.index(s) for s in states)
        steps = [s["progress"]["step"] for s in seen]
        assert steps == sorted(steps)
        # PNDM runs 11 timesteps for 10 steps; progress counts the steps asked for.
        assert steps[-1] == seen[-1]["progress"]["steps"] == 10
        positions = [s["position"] for s in seen if s["state"] == "queued"]
        assert positions == sorted(positions, reverse=True)
        running = [s for s in seen if s["state"] == "running" and s["progress"]["step"] > 0]
        assert all(s["progress"]["eta_seconds"] is not None for s in running)
        assert all(0 < s["progress"]["fraction"] <= 1 for s in running)
        final = seen[-1]
        assert final["image_url"] == f"/images/{final['image']['id']}.png"
        assert final["progress"]["fraction"] == 1.0
    last = history[jobs[2]["id"]]
    assert last[0]["position"] in (1, 2)  # behind the others when first seen


def test_cancelling_a_queued_job_means_it_never_runs(app):
    running = submit(app, **LONG)
    wait_until(app, running["id"], lambda j: j["state"] == "running")
    queued = submit(app, prompt="never", seed="9")
    assert job(app, queued["id"])["position"] == 1
    cancelled = requests.delete(app.url(f"/jobs/{queued['id']}"))
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert job(app, running["id"])["state"] == "running"  # only that job was cancelled
    requests.delete(app.url(f"/jobs/{running['id']}"))
    final = wait_until(app, queued["id"], finished)
    assert final["started_at"] is None and final["image"] is None


def test_cancelling_the_running_job_stops_it_within_a_step_and_the_next_starts(app):
    running = submit(app, **LONG)
    after = submit(app, prompt="next", steps="3", size="64x64", seed="4")
    wait_until(app, running["id"], lambda j: j["progress"]["step"] >= 2)
    cancel = requests.post(app.url(f"/jobs/{running['id']}/cancel"))
    assert cancel.status_code == 200
    step_at_cancel = cancel.json()["progress"]["step"]
    if cancel.json()["state"] == "running":  # it stops at the model's next block
        assert cancel.json()["phase"] == "cancelling: stops at the model's next block"
    final = wait_until(app, running["id"], finished)
    assert final["state"] == "cancelled"
    assert final["progress"]["step"] <= step_at_cancel + 1
    assert final["image"] is None
    assert wait_until(app, after["id"], finished)["state"] == "succeeded"
    again = requests.delete(app.url(f"/jobs/{running['id']}"))
    assert again.status_code == 409 and "already cancelled" in again.json()["error"]["message"]


def test_unfinished_lists_every_queued_and_running_job_however_many_finished_since(app):
    running = submit(app, **LONG)
    wait_until(app, running["id"], lambda j: j["state"] == "running")
    waiting = submit(app, prompt="waiting", seed="3")
    newer = [submit(app, prompt=f"cancelled {i}") for i in range(2)]
    for gone in newer:
        assert requests.delete(app.url(f"/jobs/{gone['id']}")).status_code == 200
    newest = requests.get(app.url("/jobs"), params={"limit": 2}).json()
    assert [j["id"] for j in newest] == [newer[1]["id"], newer[0]["id"]]  # beyond its reach
    listed = requests.get(app.url("/jobs"), params={"unfinished": "true", "limit": 200})
    assert listed.status_code == 200
    assert [(j["id"], j["state"]) for j in listed.json()] == [
        (waiting["id"], "queued"),
        (running["id"], "running"),
    ]  # newest first, as GET /jobs
    one = requests.get(app.url("/jobs"), params={"unfinished": "true", "limit": 1}).json()
    assert [j["id"] for j in one] == [waiting["id"]]


def test_a_full_queue_refuses_with_retry_after(app):
    jobs = [submit(app, **LONG)]
    wait_until(app, jobs[0]["id"], lambda j: j["state"] == "running")
    jobs += [submit(app, **LONG) for _ in range(QUEUE_MAX)]
    refused = requests.post(app.url("/generate"), data={**LONG, "async": "true"})
    assert refused.status_code == 503
    assert int(refused.headers["Retry-After"]) > 0
    assert "waiting" in refused.json()["error"]["message"]


def test_async_by_header_and_query_and_same_png_as_synchronous(app):
    fields = {"prompt": "a red kite", "seed": "77", "size": "64x64", "steps": "3"}
    sync = requests.post(app.url("/generate"), data=fields)
    assert sync.status_code == 200
    by_header = requests.post(
        app.url("/generate"), data=fields, headers={"Prefer": "respond-async"}
    )
    by_query = requests.post(app.url("/generate") + "?async=1", data=fields)
    for response in (by_header, by_query):
        assert response.status_code == 202
        done = wait_until(app, response.json()["id"], finished)
        png = requests.get(app.url(done["image_url"]))
        assert png.headers["Content-Type"] == "image/png"
        assert png.content == sync.content


def test_a_retry_with_the_same_idempotency_key_gets_the_first_attempts_job(app):
    prompt = f"keyed {time.monotonic_ns()}"  # the shared store holds other modules' jobs too
    fields = {"prompt": prompt, "seed": "5", "size": "64x64", "steps": "2"}
    key = {"Idempotency-Key": f"retry-{prompt}"}
    blocker = submit(app, **LONG)
    wait_until(app, blocker["id"], lambda j: j["state"] == "running")
    with pytest.raises(requests.Timeout):  # the first attempt's client stops waiting
        requests.post(app.url("/generate"), data=fields, headers=key, timeout=1)
    requests.delete(app.url(f"/jobs/{blocker['id']}"))
    retry = requests.post(app.url("/generate"), data=fields, headers=key)
    assert retry.status_code == 200, retry.text
    again = requests.post(app.url("/generate"), data=fields, headers=key)  # after it succeeded
    queued = requests.post(app.url("/generate"), data={**fields, "async": "1"}, headers=key)
    assert again.status_code == 200 and queued.status_code == 202
    assert retry.headers["X-Job-Id"] == again.headers["X-Job-Id"] == queued.json()["id"]
    assert again.content == retry.content
    listed = requests.get(app.url("/jobs"), params={"limit": 200}).json()
    assert [j["id"] for j in listed if j["parameters"]["prompt"] == prompt] == [
        retry.headers["X-Job-Id"]
    ]  # one job, run once
    other = requests.post(app.url("/generate"), data=fields, headers={"Idempotency-Key": "new"})
    assert other.status_code == 200 and other.headers["X-Job-Id"] != retry.headers["X-Job-Id"]


def test_records_match_their_request_and_pngs_carry_the_parameters(app):
    fields = {
        "prompt": "a quiet harbour",
        "negative_prompt": "people",
        "steps": "3",
        "guidance": "4.5",
        "size": "72x64",
        "seed": "1234",
    }
    sync = requests.post(app.url("/generate"), data=fields)
    image_id = sync.headers["X-Image-Id"]
    record = requests.get(app.url(f"/images/{image_id}")).json()
    assert record["id"] == image_id and record["device"] == "cpu"
    assert record["parameters"] == {
        "prompt": "a quiet harbour",
        "negative_prompt": "people",
        "steps": 3,
        "guidance": 4.5,
        "width": 72,
        "height": 64,
        "seed": 1234,
        "scheduler": "PLMS",  # none chosen: the model's own, PNDM, by A1111's name
        "model_id": SD_REPO,
        "revision": requests.get(app.url("/model/status")).json()["commit"],
    }
    timings = record["timings"]
    stages = ("encode_seconds", "denoise_seconds", "decode_seconds")
    assert set(timings) == {"queued_seconds", "model_wait_seconds", "generation_seconds",
                            *stages, "png_seconds"}  # fmt: skip
    assert all(timings[stage] > 0 for stage in stages)
    # The stages are parts of the generation (rounding to ms on each side).
    assert sum(timings[stage] for stage in stages) <= timings["generation_seconds"] + 0.003
    assert record["created_at"].endswith("Z")

    text = Image.open(io.BytesIO(sync.content)).text
    assert text["parameters"].startswith("a quiet harbour\nNegative prompt: people\nSteps: 3,")
    assert "CFG scale: 4.5, Seed: 1234, Size: 72x64" in text["parameters"]
    assert json.loads(text["imagegen"]) == record["parameters"]


def test_images_and_jobs_are_listed_newest_first_in_pages(app):
    """/images pages; /jobs stays a bare list, and ?paged=true pages the board of either mode
    as /images pages (one set of images for both)."""
    made = [
        requests.post(app.url("/generate"), data={"prompt": f"page {i}", "size": "64x64"})
        for i in range(3)
    ]
    ids = [response.headers["X-Image-Id"] for response in made]
    first = requests.get(app.url("/images"), params={"limit": 2}).json()
    assert [r["id"] for r in first["items"]] == ids[::-1][:2]
    second = requests.get(app.url(first["next"])).json()
    assert second["items"][0]["id"] == ids[0]
    listed = requests.get(app.url("/jobs")).json()
    assert listed[0]["image"]["id"] == ids[-1]  # newest job first

    job_ids = [response.headers["X-Job-Id"] for response in made]
    assert isinstance(requests.get(app.url("/jobs"), params={"limit": 2}).json(), list)
    first = requests.get(app.url("/jobs"), params={"limit": 2, "paged": "true"}).json()
    assert [job["id"] for job in first["items"]] == job_ids[::-1][:2]
    assert first["next"] == f"/jobs?paged=true&limit=2&before={job_ids[1]}"
    second = requests.get(app.url(first["next"])).json()
    assert second["items"][0]["id"] == job_ids[0]


def test_a_deleted_image_is_gone_from_the_listing_the_png_and_its_record(app):
    made = requests.post(app.url("/generate"), data={"prompt": "to delete", "size": "64x64"})
    assert made.status_code == 200, made.text
    image_id = made.headers["X-Image-Id"]
    record = requests.get(app.url(f"/images/{image_id}")).json()
    deleted = requests.delete(app.url(f"/images/{image_id}"))
    assert deleted.status_code == 200 and deleted.json() == record  # the record removed
    for path in (f"/images/{image_id}", f"/images/{image_id}.png"):
        assert requests.get(app.url(path)).status_code == 404
    listed = requests.get(app.url("/images"), params={"limit": 100}).json()["items"]
    assert image_id not in [r["id"] for r in listed]
    again = requests.delete(app.url(f"/images/{image_id}"))
    assert again.status_code == 404 and again.json()["error"]["message"] == "No such image"


@pytest.mark.parametrize(
    "path",
    ["/jobs/nope", "/jobs/0123456789abcdef", "/images/nope", "/images/nope.png",
     "/images/20260101T000000000000Z-abcdef", "/images/..%2F..%2Fsecret.png"],
)  # fmt: skip
def test_unknown_ids_are_404_in_the_image_error_shape(app, path):
    response = requests.get(app.url(path))
    assert response.status_code == 404
    assert set(response.json()) == {"error"} and response.json()["error"]["message"]


def test_cancelling_an_unknown_job_is_404(app):
    for response in (
        requests.delete(app.url("/jobs/nope")),
        requests.post(app.url("/jobs/nope/cancel")),
    ):
        assert response.status_code == 404


def test_a_synchronous_generation_past_gen_sync_timeout_is_504_and_its_job_cancelled(app):
    started = time.monotonic()
    response = requests.post(
        app.url("/generate"), data={"prompt": "too long", "steps": "500", "size": "128x128"}
    )
    waited = time.monotonic() - started
    assert response.status_code == 504, response.text
    assert SYNC_TIMEOUT <= waited < SYNC_TIMEOUT + 3
    message = response.json()["error"]["message"]
    assert message.startswith("No image within GEN_SYNC_TIMEOUT; job ")
    job_id = message.split("job ", 1)[1].split()[0]
    assert (
        f"is cancelled (a running job stops at the model's next block: GET /jobs/{job_id}"
        in message
    )
    assert "async=true" in message
    seen = job(app, job_id)  # what the answer said is what the job says
    assert seen["state"] == "cancelled" or seen["phase"].startswith("cancelling")
    final = wait_until(app, job_id, finished)
    assert final["state"] == "cancelled" and final["image"] is None


def test_an_async_edit_runs_from_the_stored_inputs_and_keeps_the_pixels_outside_its_mask(app):
    """In distributed mode the worker reads the inputs from the share, never from Redis:
    the same job as in process, the same record, the same kept pixels."""
    rng = np.random.default_rng(9)
    source = Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8), "RGB")
    mask = Image.new("L", (64, 64))
    mask.paste(255, (40, 40, 56, 56))
    sent = {name: png(image) for name, image in (("image", source), ("mask", mask))}
    response = requests.post(
        app.url("/generate"),
        data={"prompt": "a window", "steps": "4", "strength": "0.5", "seed": "2", "async": "true"},
        files={name: (f"{name}.png", data, "image/png") for name, data in sent.items()},
    )
    assert response.status_code == 202, response.text
    done = wait_until(app, response.json()["id"], finished)
    assert done["state"] == "succeeded", done
    assert (done["progress"]["step"], done["progress"]["steps"]) == (2, 2)
    edit = done["image"]["parameters"]["edit"]
    assert edit["steps_run"] == 2
    for field, name in (("source", "image"), ("mask", "mask")):
        assert edit[field]["sha256"] == hashlib.sha256(sent[name]).hexdigest()
        assert requests.get(app.url(edit[field]["url"])).content == sent[name]
    out = np.asarray(Image.open(io.BytesIO(requests.get(app.url(done["image_url"])).content)))
    kept = np.ones((64, 64), bool)
    kept[40 - 8 : 56 + 8, 40 - 8 : 56 + 8] = False  # the square and twice mask_blur around it
    assert (out[kept] == np.asarray(source)[kept]).all()
    assert (out[40:56, 40:56] != np.asarray(source)[40:56, 40:56]).any()
    # The inputs go with the image made from them (on the share in distributed mode).
    assert requests.delete(app.url(f"/images/{done['image']['id']}")).status_code == 200
    for field in ("source", "mask"):
        assert requests.get(app.url(edit[field]["url"])).status_code == 404


def png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def test_a_keyed_jobs_retry_queues_anew_after_a_cancel_or_a_failure_and_keys_are_per_client(app):
    """A key joins a job that may still give its image; a cancelled or failed one is queued
    again (the retry is a new attempt), and the same key from another client is not theirs."""
    prompt = f"keyed again {time.monotonic_ns()}"
    fields = {"prompt": prompt, "seed": "3", "size": "64x64", "steps": "2", "async": "true"}
    key = {"Idempotency-Key": f"again-{prompt}"}
    blocker = submit(app, **LONG)
    wait_until(app, blocker["id"], lambda j: j["state"] == "running")
    first = requests.post(app.url("/generate"), data=fields, headers=key).json()
    assert requests.delete(app.url(f"/jobs/{first['id']}")).status_code == 200
    after_cancel = requests.post(app.url("/generate"), data=fields, headers=key).json()
    assert after_cancel["id"] != first["id"] and after_cancel["state"] == "queued"
    theirs = {**key, "Authorization": "Bearer someone-else"}
    other_client = requests.post(app.url("/generate"), data=fields, headers=theirs).json()
    assert other_client["id"] not in (first["id"], after_cancel["id"])
    # An edit whose input is gone from the store when it runs fails, naming it.
    source = png(Image.new("RGB", (64, 64), (200, 30, 30)))
    edit_key = {"Idempotency-Key": f"edit-{prompt}"}
    upload = {"image": ("in.png", source, "image/png")}
    failing = requests.post(app.url("/generate"), data=fields, files=upload, headers=edit_key)
    assert failing.status_code == 202, failing.text
    (Path(app.env["OUTPUT_DIR"]) / "inputs" / hashlib.sha256(source).hexdigest()).unlink()
    requests.delete(app.url(f"/jobs/{blocker['id']}"))
    failed = wait_until(app, failing.json()["id"], finished)
    assert failed["state"] == "failed", failed
    retried = requests.post(app.url("/generate"), data=fields, files=upload, headers=edit_key)
    assert retried.json()["id"] != failed["id"]
    assert wait_until(app, retried.json()["id"], finished)["state"] == "succeeded"


def test_a_keyed_attempt_that_gives_up_while_its_retry_waits_leaves_it_the_job(app):
    """Both wait on one job; the first to reach GEN_SYNC_TIMEOUT is told who still waits
    (its retry, by the same key) and the job is not cancelled under the retry."""
    prompt = f"keyed patience {time.monotonic_ns()}"
    fields = {"prompt": prompt, "seed": "4", "size": "64x64", "steps": "2"}
    key = {"Idempotency-Key": f"patient-{prompt}"}
    blocker = submit(app, **LONG)
    wait_until(app, blocker["id"], lambda j: j["state"] == "running")
    answers: dict[str, requests.Response] = {}

    def ask(name: str) -> None:
        answers[name] = requests.post(app.url("/generate"), data=fields, headers=key)

    first = threading.Thread(target=ask, args=("first",))
    first.start()
    time.sleep(SYNC_TIMEOUT / 2)
    retry = threading.Thread(target=ask, args=("retry",))
    retry.start()
    first.join()
    gave_up = answers["first"]
    assert gave_up.status_code == 504, gave_up.text
    message = gave_up.json()["error"]["message"]
    assert "still running for another request that is waiting for them" in message
    assert "the same Idempotency-Key" in message
    requests.delete(app.url(f"/jobs/{blocker['id']}"))
    retry.join()
    assert answers["retry"].status_code == 200, answers["retry"].text


def test_a_job_says_the_request_id_that_queued_it(app):
    """X-Request-ID follows the request into its job: GET /jobs/<id> says it, as the logs
    of the web process and of the worker do."""
    response = requests.post(
        app.url("/generate"), headers={"X-Request-ID": "from-the-ingress.1"},
        data={"prompt": "traced", "size": "64x64", "steps": "2", "async": "true"},
    )  # fmt: skip
    assert response.headers["X-Request-ID"] == "from-the-ingress.1"
    done = wait_until(app, response.json()["id"], finished)
    assert done["request_id"] == "from-the-ingress.1"
