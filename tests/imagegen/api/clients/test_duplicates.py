"""Clients of these protocols wait, and retry: a retry or an identical request that arrives
while its twin is queued or running joins that job instead of queueing the work again; a
request that cannot succeed by retrying says so (x-should-retry: false). Against the open
app (the SDK's retry against the token app, which runs in both job modes), with a long job
holding the worker so that what is submitted waits in the queue for as long as a test needs.
A request meant to give up is sent under a GEN_SYNC_TIMEOUT of a few seconds (read per
request); the others have the apps' 60 s."""

import base64
import threading
import time
from collections.abc import Callable, Iterator

import httpx2
import openai
import pytest
import requests
from django.test import override_settings

from tests.imagegen.api.clients.conftest import (
    BEARER,
    TOKEN,
    cancel,
    jobs,
    settle,
    start_blocker,
    wait_until,
)
from tests.support.processes import AppServer

SHORT_SYNC_TIMEOUT = 3  # seconds a request meant to give up waits


@pytest.fixture
def app(open_app: AppServer) -> Iterator[AppServer]:
    settle(open_app)
    yield open_app
    settle(open_app)


@pytest.fixture
def token(token_app: AppServer) -> Iterator[AppServer]:
    settle(token_app)
    yield token_app
    settle(token_app)


class Call(threading.Thread):
    """One request in a thread: its result or its exception."""

    def __init__(self, function, *args, **kwargs) -> None:
        super().__init__()
        self.function, self.args, self.kwargs = function, args, kwargs
        self.result = self.error = None
        self.start()

    def run(self) -> None:
        try:
            self.result = self.function(*self.args, **self.kwargs)
        except Exception as error:
            self.error = error

    def outcome(self):
        self.join(60)
        assert not self.is_alive()
        if self.error:
            raise self.error
        return self.result


def sdk(
    app: AppServer,
    attempts: list,
    api_key: str = "k",
    retry_timeout: float | None = None,
    on_retry: Callable[[], None] | None = None,
    **options,
) -> openai.OpenAI:
    """The SDK with a hook that records each attempt it sends (its retry count header), and
    gives each retry `retry_timeout` seconds when set (the first attempt has the SDK's own);
    `on_retry` runs as each retry is sent."""

    def record(request: httpx2.Request) -> None:
        attempts.append(request.headers["x-stainless-retry-count"])
        if attempts[-1] != "0":
            if retry_timeout is not None:
                request.extensions["timeout"] = httpx2.Timeout(retry_timeout).as_dict()
            if on_retry is not None:
                on_retry()

    http = openai.DefaultHttpxClient(event_hooks={"request": [record]})
    return openai.OpenAI(base_url=app.url("/v1"), api_key=api_key, http_client=http, **options)


def post(app: AppServer, body: dict, **headers: str) -> requests.Response:
    return requests.post(app.url("/v1/images/generations"), json=body, headers=headers)


def queued(app: AppServer, prompt: str, count: int = 1) -> list[dict]:
    return wait_until(lambda: len(found := jobs(app, prompt)) == count and found)


def stored_png(app: AppServer, job: dict) -> bytes:
    return requests.get(app.url(job["image_url"]), headers=BEARER).content


@pytest.mark.both_modes
def test_the_sdks_retry_after_its_timeout_joins_the_job_it_started(token):
    # Its requests wait 60 s: the SDK (2 s) gives up first, and retries. The retry is given
    # 60 s (the hook) for the job once the blocker goes, long for a busy machine: an attempt
    # after the job finished would start a job of its own.
    app = token
    blocker = start_blocker(app)
    attempts: list[str] = []
    at_retry: list[int] = []  # the jobs there as the retry is sent: the first attempt's
    client = sdk(
        app, attempts, api_key=TOKEN, retry_timeout=60, timeout=2, max_retries=3,
        on_retry=lambda: at_retry.append(len(jobs(app, "dup retry"))),
    )  # fmt: skip
    call = Call(client.images.generate, prompt="dup retry", size="64x64", extra_body={"seed": 5})
    wait_until(lambda: len(attempts) >= 2, timeout=30)  # the first attempt timed out
    time.sleep(0.5)  # the retry reaches the service, which has the job queued still
    assert [j["state"] for j in jobs(app, "dup retry")] == ["queued"]
    cancel(app, blocker)
    result = call.outcome()
    assert attempts == ["0", "1"]  # the retry got the image
    assert at_retry == [1]  # it joined the job the first attempt had queued
    (job,) = jobs(app, "dup retry")  # and the queue shows one job
    assert job["state"] == "succeeded" and job["parameters"]["seed"] == 5
    assert base64.b64decode(result.data[0].b64_json) == stored_png(app, job)


def test_identical_requests_while_queued_share_one_job_per_client(app):
    blocker = start_blocker(app)
    body = {"prompt": "dup twins", "size": "64x64"}
    first = Call(post, app, body, Authorization="Bearer alice")
    queued(app, "dup twins")
    twin = Call(post, app, body, Authorization="Bearer alice")
    time.sleep(0.5)
    assert len(jobs(app, "dup twins")) == 1
    stranger = Call(post, app, body, Authorization="Bearer bob")  # another client: its own
    queued(app, "dup twins", 2)
    cancel(app, blocker)
    a, b, c = first.outcome(), twin.outcome(), stranger.outcome()
    for response in (a, b, c):
        assert response.status_code == 200, response.text
    assert a.json()["data"] == b.json()["data"] != c.json()["data"]
    assert len(jobs(app, "dup twins")) == 2


def test_an_idempotency_key_decides_when_given(app):
    blocker = start_blocker(app)
    body = {"prompt": "dup keyed", "size": "64x64"}
    first = Call(post, app, body, **{"Idempotency-Key": "k1"})
    queued(app, "dup keyed")
    retry = Call(post, app, {**body, "prompt": "dup keyed, edited"}, **{"Idempotency-Key": "k1"})
    other = Call(post, app, body, **{"Idempotency-Key": "k2"})
    queued(app, "dup keyed", 2)
    time.sleep(0.5)
    cancel(app, blocker)
    a, b, c = first.outcome(), retry.outcome(), other.outcome()
    for response in (a, b, c):
        assert response.status_code == 200, response.text
    assert a.json()["data"] == b.json()["data"] != c.json()["data"]
    assert jobs(app, "dup keyed, edited") == []


def test_a_request_that_gives_up_leaves_the_job_to_a_twin_still_waiting(app):
    blocker = start_blocker(app)
    body = {"prompt": "dup patient", "size": "64x64"}
    with override_settings(GEN_SYNC_TIMEOUT=SHORT_SYNC_TIMEOUT):  # read as it arrives
        first = Call(post, app, body)
        (job,) = queued(app, "dup patient")
    twin = Call(post, app, body)  # the app's 60 s: it joins long before the first gives up
    gave_up = first.outcome()
    assert gave_up.status_code == 504
    assert gave_up.headers["x-should-retry"] == "false"
    message = gave_up.json()["error"]["message"]
    still = "still running for another request that is waiting for them (an identical one"
    assert f"job(s) {job['id']}: {still}" in message
    assert jobs(app, "dup patient")[0]["state"] == "queued"  # not cancelled
    cancel(app, blocker)
    assert twin.outcome().status_code == 200
    assert [j["state"] for j in jobs(app, "dup patient")] == ["succeeded"]


def test_a_generation_past_gen_sync_timeout_is_504_and_the_sdk_does_not_retry(app):
    attempts: list[str] = []
    client = sdk(app, attempts, max_retries=2)
    started = time.monotonic()
    with (
        override_settings(GEN_SYNC_TIMEOUT=2),
        pytest.raises(openai.InternalServerError) as refused,
    ):  # 400 steps of 128x128: a minute or more
        client.images.generate(prompt="dup slow", size="128x128", extra_body={"steps": 400})
    assert refused.value.status_code == 504
    assert time.monotonic() - started < 2 + 5
    assert attempts == ["0"]
    assert "cancelled" in refused.value.message
    (job,) = jobs(app, "dup slow")
    wait_until(lambda: jobs(app, "dup slow")[0]["state"] == "cancelled")
    assert job["id"]


def test_a_full_queue_refuses_the_whole_request_with_retry_after(app):
    blocker = start_blocker(app)
    for index in range(6):  # GEN_QUEUE_MAX is 8: room for two more
        requests.post(app.url("/generate"), data={"prompt": f"filler {index}", "async": "1"})
    response = post(app, {"prompt": "dup too many", "size": "64x64", "n": 3})
    assert response.status_code == 503
    assert int(response.headers["Retry-After"]) > 0
    assert response.headers["x-should-retry"] == "true"  # the SDK retries after Retry-After
    assert response.json()["error"]["type"] == "server_error"
    # the two that fitted were taken out again: nothing of it runs
    assert {j["state"] for j in jobs(app, "dup too many")} <= {"cancelled"}
    cancel(app, blocker)
