"""GET /jobs/<id>/events over HTTP on the tiny pipeline, in process (the app served from this
process) and distributed (a web replica under gunicorn): the events' order, one event per step
and per change of state, position or phase, the stream ending after the final state and before
EVENT_STREAM_SECONDS, resuming with Last-Event-ID, and the bound on open streams, which keeps
/health answering (under gunicorn's bounded threads in the distributed run)."""

import io
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from PIL import Image

from imagegen.generation.job_board import CANCELLING
from tests.support import sse
from tests.support.in_process import Served, ready_in_either_mode
from tests.support.jobs import cancel_all
from tests.support.model_service import MODES
from tests.support.processes import AppServer
from tests.support.sse import Event, open_stream

STREAMS_MAX = 2
STREAM_SECONDS = 3
LONG = {"prompt": "a long one", "steps": "400", "size": "64x64"}
FINAL = {"succeeded", "failed", "cancelled"}


@pytest.fixture(scope="module", params=MODES)
def app(
    request: pytest.FixtureRequest, hub_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """Every test here runs in both modes: in process, and distributed (Redis, a worker),
    where the stream waits on the shared store's revisions."""
    env = {
        "GEN_MAX_STEPS": "500",
        "EVENT_STREAMS_MAX": str(STREAMS_MAX),
        "EVENT_STREAM_SECONDS": str(STREAM_SECONDS),
        "EVENT_STREAM_KEEPALIVE": "0.5",
    }
    work = tmp_path_factory.mktemp(f"events-{request.param}")
    with ready_in_either_mode(request, request.param, hub_root, work, **env) as server:
        yield server


@pytest.fixture(autouse=True)
def idle_queue(app: Served) -> Iterator[None]:
    """Each test ends with no job queued or running (and so with no stream left open)."""
    yield
    cancel_all(app)


class _AsBytesArrive:
    """A response read as its bytes arrive, as a browser's EventSource reads: the server served
    here sends a stream without chunks, which requests would otherwise read 512 bytes at a time
    (an event would wait for the next ones)."""

    def __init__(self, response: requests.Response) -> None:
        self.response = response

    def iter_lines(self, **kwargs: Any) -> Iterator[Any]:
        return self.response.iter_lines(chunk_size=1, **kwargs)


def read_events(response: requests.Response) -> Iterator[Event]:
    return sse.read_events(_AsBytesArrive(response))  # type: ignore[arg-type]


def submit(app: Served, **fields: str) -> str:
    response = requests.post(app.url("/generate"), data={**fields, "async": "true"})
    assert response.status_code == 202, response.text
    return response.json()["id"]


def events_of(app: Served, job_id: str, last_event_id: str | None = None) -> list[Event]:
    """Every event of one stream, read until the server ends it."""
    with open_stream(app.url(f"/jobs/{job_id}/events"), last_event_id=last_event_id) as response:
        assert response.status_code == 200, response.text
        assert response.headers["Content-Type"] == "text/event-stream"
        assert response.headers["Cache-Control"] == "no-cache"
        return list(read_events(response))


def last_event_id(events: list[Event]) -> str | None:
    """The id a client resumes with: the last one received (a browser keeps it across
    `preview` events, which carry none)."""
    return next((event.id for event in reversed(events) if event.id is not None), None)


def follow(app: Served, job_id: str, timeout: float = 120) -> list[list[Event]]:
    """The job's events from the start to its final state, one list per stream: each stream
    the server ends is resumed with the last id received, as a client does."""
    streams: list[list[Event]] = []
    last_id = None
    deadline = time.monotonic() + timeout
    while not streams or streams[-1] == [] or streams[-1][-1].name not in FINAL:
        assert time.monotonic() < deadline, streams
        streams.append(events_of(app, job_id, last_id))
        last_id = last_event_id(streams[-1]) or last_id
    return streams


def wait_running(app: Served, job_id: str, min_step: int = 1) -> None:
    deadline = time.monotonic() + 60
    while True:
        job = requests.get(app.url(f"/jobs/{job_id}")).json()
        if job["state"] == "running" and job["progress"]["step"] >= min_step:
            return
        assert job["state"] not in FINAL and time.monotonic() < deadline, job
        time.sleep(0.02)


def test_a_job_streams_its_states_in_order_each_step_once_and_the_stream_ends(app):
    ahead = submit(app, prompt="ahead", steps="40", size="64x64", seed="1")
    wait_running(app, ahead, min_step=0)  # taken by the worker: the watched job waits first
    job_id = submit(app, prompt="watched", steps="12", size="64x64", seed="2")
    events = [event for stream in follow(app, job_id) for event in stream]
    names = [event.name for event in events]

    assert names[0] == "queued" and events[0].data["position"] == 1
    assert events[0].data["id"] == job_id and events[0].data["parameters"]["prompt"] == "watched"
    order = ["queued", "running", "step", "succeeded"]
    firsts = [names.index(name) for name in order]
    assert firsts == sorted(firsts)
    assert names[-1] == "succeeded" and names.count("succeeded") == 1
    steps = [event.data["step"] for event in events if event.name == "step"]
    total = events[-1].data["progress"]["steps"]
    assert total == 12  # the steps asked for, not PNDM's 13 timesteps
    assert steps == list(range(1, total + 1))  # each step once, in order
    assert all(e.data["steps"] == total for e in events if e.name == "step")
    assert events[-1].data["image_url"] == f"/images/{events[-1].data['image']['id']}.png"
    phases = [event.data["phase"] for event in events if event.name == "running"]
    # Changes of phase in quick succession may arrive as one (the latest); never out of order.
    order_of_phases = ["loading the model", "denoising", "decoding", "saving"]
    places = [order_of_phases.index(phase) for phase in phases]
    assert places and places == sorted(set(places))
    ids = [event.id for event in events if event.name != "preview"]
    assert len(set(ids)) == len(ids) and None not in ids  # every event but a preview has its own
    requests.delete(app.url(f"/jobs/{ahead}"))


def test_a_queued_job_gets_an_event_when_a_job_ahead_leaves_and_keepalives_meanwhile(app):
    running = submit(app, **LONG)
    wait_running(app, running)
    leaving = submit(app, prompt="leaves", seed="3")
    watched = submit(app, prompt="moves up", seed="4")
    seen: list[Event] = []

    def watch() -> None:
        with open_stream(app.url(f"/jobs/{watched}/events")) as response:
            for event in read_events(response):
                seen.append(event)
                if event.name == "queued" and event.data["position"] == 1:
                    return

    watcher = threading.Thread(target=watch)
    watcher.start()
    time.sleep(1)  # nothing changes for the watched job: keep-alive comments only (0.5 s)
    assert [(e.name, e.data["position"]) for e in seen] == [("queued", 2)]
    requests.delete(app.url(f"/jobs/{leaving}"))
    watcher.join(10)
    assert not watcher.is_alive()
    assert [(e.name, e.data["position"]) for e in seen] == [("queued", 2), ("queued", 1)]
    assert "keep-alive" in seen[1].comments


def test_a_stream_ends_before_its_life_and_resumes_with_last_event_id_losing_no_step(app):
    job_id = submit(app, **{**LONG, "steps": "500", "size": "128x128"}, seed="5")  # outlives both
    # Stepping before the first stream opens, so its life holds steps even on a busy machine
    # (the suite's other worker) where the job's start can take seconds.
    wait_running(app, job_id)
    started = time.monotonic()
    with open_stream(app.url(f"/jobs/{job_id}/events")) as response:
        first = list(read_events(response))
    assert STREAM_SECONDS <= time.monotonic() - started < STREAM_SECONDS + 2
    assert first[-1].name not in FINAL  # ended by its life, not by the job
    # Away while several steps run: the resumed stream must send each of them.
    sent_last = max(e.data["step"] for e in first if e.name == "step")
    wait_running(app, job_id, min_step=sent_last + 3)
    second_started = time.monotonic()
    resume_from = last_event_id(first)
    with open_stream(app.url(f"/jobs/{job_id}/events"), last_event_id=resume_from) as response:
        second = list(read_events(response))
    requests.delete(app.url(f"/jobs/{job_id}"))
    # Ended by its life again (or by the job's end, on a fast machine).
    assert second[-1].name in FINAL or time.monotonic() - second_started >= STREAM_SECONDS - 0.5
    first_steps = [e.data["step"] for e in first if e.name == "step"]
    second_steps = [e.data["step"] for e in second if e.name == "step"]
    assert first_steps and second_steps
    # A new stream starts at the job as it is (its progress), then sends each step; the
    # resumed one goes on right after the last step received.
    steps = first_steps + second_steps
    assert steps == list(range(steps[0], steps[0] + len(steps)))


def test_a_finished_job_streams_its_final_state_once_and_nothing_after_its_id(app):
    job_id = submit(app, prompt="short", steps="2", size="64x64")
    follow(app, job_id)
    raw = requests.get(app.url(f"/jobs/{job_id}/events"), timeout=30).text
    assert raw.startswith("retry: 1000\n\n")  # how long a client waits after an error
    again = events_of(app, job_id)
    assert [event.name for event in again] == ["succeeded"]
    assert events_of(app, job_id, last_event_id=again[0].id) == []


def follow_live(app: Served, job_id: str, seen: list[Event], timeout: float = 120) -> None:
    """`follow`, appending each event to `seen` as it arrives (another thread watches it)."""
    last_id = None
    deadline = time.monotonic() + timeout
    while not seen or seen[-1].name not in FINAL:
        assert time.monotonic() < deadline, seen
        with open_stream(app.url(f"/jobs/{job_id}/events"), last_event_id=last_id) as response:
            assert response.status_code == 200, response.text
            for event in read_events(response):
                seen.append(event)
        last_id = last_event_id(seen)


def test_cancelling_a_running_job_streams_the_cancelling_phase_then_cancelled(app):
    """What a client must see after cancelling a running job: the cancelled state as the
    stream's last event, no escape for a job that stops unseen; and the cancelling phase, when
    the stream sees it, once, right before. The job stops at the model's next block, on the
    tiny model within milliseconds (distributed: within the worker's next heartbeat, a
    second), so the stream may go from running to cancelled without seeing the phase
    (tests/imagegen/generation/test_cancel_mid_step.py times the stop itself)."""
    job_id = submit(app, **{**LONG, "size": "256x256"}, seed="6")
    seen: list[Event] = []
    reader = threading.Thread(target=follow_live, args=(app, job_id, seen), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while not any(event.name == "step" for event in seen):
        assert reader.is_alive() and time.monotonic() < deadline, seen
        time.sleep(0.005)
    cancel = requests.delete(app.url(f"/jobs/{job_id}"), timeout=30)
    assert cancel.status_code == 200, cancel.text
    answer = cancel.json()
    reader.join(60)
    assert not reader.is_alive(), seen

    statuses = [(e.name, e.data["phase"]) for e in seen if e.name not in ("step", "preview")]
    cancelled = ("cancelled", "cancelled while running")
    assert statuses[-1] == cancelled and statuses.count(cancelled) == 1, statuses
    assert seen[-1].data["progress"]["step"] <= answer["progress"]["step"] + 1
    if answer["state"] == "cancelled":
        return  # it had stopped before the cancel answered: the stream shows the state
    assert (answer["state"], answer["phase"]) == ("running", CANCELLING), answer
    if ("running", CANCELLING) not in statuses:
        return  # stopped before the stream looked again
    # The stream shows the cancelling phase once, as the last status before cancelled; only
    # the step then under way (at most one) comes between the two.
    assert statuses[-2:] == [("running", CANCELLING), cancelled], statuses
    assert statuses.count(("running", CANCELLING)) == 1, statuses
    phase_at = max(i for i, e in enumerate(seen) if e.name == "running")
    between = [e.name for e in seen[phase_at + 1 : -1] if e.name != "preview"]
    assert between in ([], ["step"]), seen[phase_at:]


def steps_sent_before(events: list[Event], index: int) -> int:
    """The last step a client knows at event `index`: from the step events, or the first
    event's job (a new stream starts at the job as it is)."""
    known = [e.data["step"] for e in events[:index] if e.name == "step"]
    known += [e.data["progress"]["step"] for e in events[:index] if "progress" in e.data]
    return max(known, default=0)


def test_previews_follow_their_steps_without_an_id_and_a_resumed_stream_gets_the_latest_once(app):
    job_id = submit(app, **{**LONG, "size": "128x128"}, seed="9")
    wait_running(app, job_id)
    with open_stream(app.url(f"/jobs/{job_id}/events")) as response:
        first = list(read_events(response))  # STREAM_SECONDS long: a preview a second
    previews = [i for i, event in enumerate(first) if event.name == "preview"]
    assert previews, [event.name for event in first]
    for i in previews:
        preview = first[i]
        assert preview.id is None  # never replayed
        assert preview.data["image"].startswith("data:image/jpeg;base64,")
        assert max(preview.data["width"], preview.data["height"]) <= 128 // 4
        assert 1 <= preview.data["step"] <= steps_sent_before(first, i)  # after its step
    steps_seen = [e.data["step"] for e in first if e.name == "step"]
    # Away while a newer preview is made: the resumed stream sends the steps missed, then
    # that latest preview, once.
    deadline = time.monotonic() + 60
    while True:
        latest = requests.get(app.url(f"/jobs/{job_id}/preview"), timeout=10)
        if latest.status_code == 200 and int(latest.headers["X-Preview-Step"]) > steps_seen[-1]:
            break
        assert time.monotonic() < deadline
        time.sleep(0.1)
    with open_stream(
        app.url(f"/jobs/{job_id}/events"), last_event_id=last_event_id(first)
    ) as response:
        second = list(read_events(response))
    requests.delete(app.url(f"/jobs/{job_id}"))
    resumed = [i for i, event in enumerate(second) if event.name == "preview"]
    assert resumed, [event.name for event in second]
    assert second[resumed[0]].data["step"] > steps_seen[-1]
    assert second[0].name == "step" and second[0].data["step"] == steps_seen[-1] + 1
    assert resumed[0] > 0 and second[resumed[0] - 1].name == "step"  # after the steps missed
    sent = [second[i].data["step"] for i in resumed]
    assert sent == sorted(set(sent))  # each preview once


def test_the_latest_preview_is_served_as_a_jpeg_and_404_before_the_first(app):
    running = submit(app, **{**LONG, "size": "128x128"}, seed="10")
    waiting = submit(app, prompt="waits", steps="2", size="64x64")
    before = requests.get(app.url(f"/jobs/{waiting}/preview"), timeout=10)
    assert before.status_code == 404 and "No preview yet" in before.json()["error"]["message"]
    unknown = requests.get(app.url("/jobs/0123456789abcdef/preview"), timeout=10)
    assert unknown.status_code == 404 and "No such job" in unknown.json()["error"]["message"]
    deadline = time.monotonic() + 60
    while (
        found := requests.get(app.url(f"/jobs/{running}/preview"), timeout=10)
    ).status_code != 200:
        assert found.status_code == 404 and time.monotonic() < deadline
        time.sleep(0.1)
    assert found.headers["Content-Type"] == "image/jpeg"
    assert (
        found.headers["Cache-Control"] == "no-store" and int(found.headers["X-Preview-Step"]) >= 1
    )
    image = Image.open(io.BytesIO(found.content))
    assert image.format == "JPEG" and max(image.size) <= 128 // 4 and len(found.content) < 8_000


def test_streams_beyond_the_bound_get_503_with_retry_after_and_health_still_answers(app):
    """/health beside the held streams is a claim about gunicorn's threads, checked where the
    app runs under gunicorn (the distributed variant); this process's loopback server has a
    thread per request, so there only the bound is checked."""
    job_id = submit(app, **LONG, seed="7")
    wait_running(app, job_id)
    url = app.url(f"/jobs/{job_id}/events")
    held = [open_stream(url) for _ in range(STREAMS_MAX)]
    try:
        assert all(response.status_code == 200 for response in held)
        refused = requests.get(url, timeout=10)
        assert refused.status_code == 503
        assert int(refused.headers["Retry-After"]) > 0
        assert "EVENT_STREAMS_MAX" in refused.json()["error"]["message"]
        for _ in range(5 if isinstance(app, AppServer) else 0):
            started = time.monotonic()
            health = requests.get(app.url("/health"), timeout=5)
            assert health.status_code == 200 and time.monotonic() - started < 2
    finally:
        for response in held:
            response.close()
    # A place comes back once the server notices the client left (its next write).
    deadline = time.monotonic() + 20
    while (again := open_stream(url)).status_code == 503:
        again.close()
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert again.status_code == 200
    again.close()


def test_bad_requests_are_refused_in_the_error_shape(app):
    job_id = submit(app, prompt="short", steps="1", size="64x64")
    unknown = requests.get(app.url("/jobs/0123456789abcdef/events"), timeout=10)
    assert unknown.status_code == 404 and unknown.json()["error"]["message"]
    bad = requests.get(
        app.url(f"/jobs/{job_id}/events"), headers={"Last-Event-ID": "7"}, timeout=10
    )
    assert bad.status_code == 400
    assert bad.json()["error"]["details"][0]["field"] == "Last-Event-ID"


def test_head_answers_the_headers_at_once_and_holds_no_place(app):
    job_id = submit(app, **LONG, seed="8")
    wait_running(app, job_id)
    url = app.url(f"/jobs/{job_id}/events")
    for _ in range(STREAMS_MAX + 1):  # more than the bound: none of them holds a place
        started = time.monotonic()
        head = requests.head(url, timeout=30)
        assert head.status_code == 200 and time.monotonic() - started < 5
        assert head.headers["Content-Type"] == "text/event-stream"
    with open_stream(url) as response:
        assert response.status_code == 200
