"""A synchronous request that cannot finish in time is told so at once, in process: the
estimate's arithmetic (imagegen/generation/estimates.py) on figures chosen here, then the
refusal through the real routes of every protocol on the real tiny pipeline, whose own jobs
give the measurements. Both job modes over HTTP: tests/imagegen/api/test_generate.py."""

import math
from pathlib import Path

import pytest
from django.test import Client, override_settings

from imagegen.generation.estimates import (
    Ahead,
    LocalTimings,
    Measurements,
    Timing,
    estimate,
    measured,
)
from imagegen.generation.framing import Region
from imagegen.generation.images import GenerationParameters, ImageRecord
from imagegen.generation.job_board import CANCELLING, JobProgress, JobState, JobView, ahead_of
from imagegen.generation.jobs import JobQueue
from imagegen.generation.requests import EditParameters, EditRequest, GenerationRequest, InputLink
from tests.support.loaders import new_loader, serve, wait_for

# Measured at 64x64: encoding 1 s, a step 2 s per image of the UNet's batch, decoding 3 s.
AT_64 = Timing(width=64, height=64, encode_seconds=1.0, step_seconds=2.0, decode_seconds=3.0)
ONE = Measurements(timings=(AT_64,), native=(64, 64))


def request(steps: int = 4, guidance: float = 0.0, size=(64, 64)) -> GenerationRequest:
    """A request as the boards estimate it: its defaults filled in (render.with_defaults)."""
    return GenerationRequest(prompt="p", steps=steps, guidance=guidance, size=size, seed=1)


def alone(measurements: Measurements, asked: GenerationRequest, count: int = 1):
    return estimate(measurements, asked, ahead=[], workers=1, count=count)


def test_nothing_measured_means_no_estimate():
    assert alone(Measurements(timings=(), native=None), request()) is None
    # Measured at a size, but a request for the model's own size before one ran at it.
    assert alone(Measurements(timings=(AT_64,), native=None), request(size=None)) is None


def test_at_a_measured_size_encode_steps_and_decode_add_up():
    found = alone(ONE, request(steps=4))
    assert found.seconds == found.image_seconds == 1 + 4 * 2 + 3
    assert (found.queue_seconds, found.steps, found.size, found.basis) == (0, 4, (64, 64), (64, 64))
    assert alone(ONE, request(size=None)).size == (64, 64)  # the native size, once seen


def test_an_edit_counts_the_steps_it_runs_at_the_size_it_works_at():
    """max(1, int(steps x strength)) steps (imagegen.generation.parameters), and an "only masked"
    edit at its cut-out's size, not the picture's."""
    edit = EditRequest(source="0" * 64, strength=0.5)
    assert alone(ONE, request(steps=4).model_copy(update={"edit": edit})).seconds == 1 + 2 * 2 + 3
    weak = edit.model_copy(update={"strength": 0.1})
    assert alone(ONE, request(steps=4).model_copy(update={"edit": weak})).steps == 1
    cut = Region(padding=0, box=(0, 0, 16, 16), size=(32, 32))
    masked = edit.model_copy(update={"mask": "1" * 64, "only_masked": cut})
    found = alone(ONE, request(steps=4, size=(128, 128)).model_copy(update={"edit": masked}))
    assert (found.size, found.seconds) == ((32, 32), 1 + 2 * 2 / 4 + 3 / 4)


def test_guidance_above_1_doubles_each_step_and_at_most_1_does_not():
    assert alone(ONE, request(steps=4, guidance=7.0)).seconds == 1 + 4 * 2 * 2 + 3
    assert alone(ONE, request(steps=4, guidance=1.0)).seconds == 1 + 4 * 2 + 3


def test_another_size_scales_the_nearest_measured_one_by_its_pixels():
    at_512 = Timing(width=512, height=512, encode_seconds=1.0, step_seconds=50.0,
                    decode_seconds=30.0)  # fmt: skip
    both = Measurements(timings=(AT_64, at_512), native=(64, 64))
    near_64 = alone(both, request(steps=1, size=(128, 64)))  # 2x the pixels of 64x64
    assert near_64.basis == (64, 64)
    assert near_64.image_seconds == 1 + 2 * 2 + 3 * 2
    near_512 = alone(both, request(steps=1, size=(1024, 512)))  # 2x the pixels of 512x512
    assert near_512.basis == (512, 512)
    assert near_512.image_seconds == 1 + 50 * 2 + 30 * 2


def test_the_jobs_ahead_are_waited_for_what_is_left_of_the_running_one_first():
    whole = 1 + 4 * 2 + 3  # one job ahead of 4 steps at 64x64
    running = Ahead(request(steps=4), steps_done=3)  # one step and the decode left
    queued = Ahead(request(steps=4))
    found = estimate(ONE, request(steps=4), ahead=[running, queued], workers=1)
    assert found.queue_seconds == (2 + 3) + whole
    assert found.seconds == found.queue_seconds + whole
    # Two workers: the queued job takes the free one, the request the running job's.
    two = estimate(ONE, request(steps=4), ahead=[running, queued], workers=2)
    assert two.queue_seconds == 2 + 3


def test_a_request_of_several_images_waits_for_all_of_them():
    whole = 1 + 4 * 2 + 3
    assert alone(ONE, request(), count=3).seconds == 3 * whole
    spread = estimate(ONE, request(), ahead=[], workers=2, count=3)
    assert spread.seconds == 2 * whole and spread.image_seconds == whole


def test_a_stopping_or_finished_job_leaves_nothing_ahead():
    def view(state: JobState, phase: str) -> JobView:
        progress = JobProgress(step=2, steps=4, fraction=0.5, elapsed_seconds=1.0,
                               eta_seconds=1.0)  # fmt: skip
        return JobView(id="j", state=state, position=None, phase=phase, progress=progress,
                       parameters=request(), created_at=None, started_at=None,
                       finished_at=None, error=None, image=None)  # fmt: skip

    assert ahead_of(view(JobState.RUNNING, "denoising")) == Ahead(request(), steps_done=2)
    assert ahead_of(view(JobState.QUEUED, "waiting for its turn")) == Ahead(request())
    assert ahead_of(view(JobState.RUNNING, CANCELLING)) is None
    assert ahead_of(view(JobState.SUCCEEDED, "done")) is None


def record(device: str = "cpu", guidance: float = 7.0) -> ImageRecord:
    parameters = GenerationParameters(
        prompt="p", negative_prompt=None, steps=4, guidance=guidance, width=72, height=64,
        seed=1, scheduler="Euler", model_id="m", revision=None,
    )  # fmt: skip
    timings = {"encode_seconds": 0.5, "denoise_seconds": 8.0, "decode_seconds": 1.5}
    return ImageRecord(id="i", created_at="t", parameters=parameters, device=device,
                       timings={"queued_seconds": 0.0, **timings})  # fmt: skip


def test_a_finished_image_measures_a_step_per_image_of_the_batch_at_its_size():
    assert measured(record(guidance=7.0), home="cpu") == Timing(
        width=72, height=64, encode_seconds=0.5, step_seconds=1.0, decode_seconds=1.5
    )  # 8 s over 4 steps of a batch of two
    assert measured(record(guidance=0.0), home="cpu").step_seconds == 2.0
    # force_cpu on an accelerator host: not what a job of this process costs.
    assert measured(record(device="cpu"), home="cuda") is None


def test_an_edit_measures_the_steps_it_ran_at_the_size_it_worked_at():
    """4 steps asked at strength 0.5 ran 2 (8 s: 2 s a step of a batch of two); an "only
    masked" edit's figures are its cut-out's size, not the picture's."""
    base = record(guidance=7.0)
    source = InputLink(sha256="0" * 64, url="/images/inputs/0")
    edit = EditParameters(source=source, mask=None, strength=0.5, mask_blur=4, steps_run=2)
    parameters = base.parameters.model_copy(update={"edit": edit})
    found = measured(base.model_copy(update={"parameters": parameters}), home="cpu")
    assert (found.step_seconds, found.size) == (2.0, (72, 64))
    cut = Region(padding=0, box=(0, 0, 16, 16), size=(32, 32))
    masked = parameters.model_copy(
        update={"edit": edit.model_copy(update={"mask": source, "only_masked": cut})}
    )
    found = measured(base.model_copy(update={"parameters": masked}), home="cpu")
    assert (found.step_seconds, found.size) == (2.0, (32, 32))


def timing(step: float, *, encode: float = 1.0, decode: float = 3.0) -> Timing:
    return Timing(width=64, height=64, encode_seconds=encode, step_seconds=step,
                  decode_seconds=decode)  # fmt: skip


def test_the_last_three_images_at_a_size_stand_for_it_each_stage_at_its_fastest():
    book = LocalTimings()
    book.record(timing(5.0, decode=1.0), native=False)  # the first after a load: slow steps
    assert book.measurements() == Measurements(timings=(timing(5.0, decode=1.0),), native=None)
    book.record(timing(2.0, encode=0.5), native=True)
    assert book.measurements() == Measurements(
        timings=(timing(2.0, encode=0.5, decode=1.0),), native=(64, 64)
    )
    book.record(timing(3.0), native=False)
    book.record(timing(4.0), native=False)  # the first one is no longer among the last three
    assert book.measurements().timings == (timing(2.0, encode=0.5, decode=3.0),)
    book.record(timing(6.0), native=False)
    book.record(timing(6.0), native=False)  # a lasting slowdown shows within three images
    assert book.measurements().timings == (timing(4.0),)


# --- the refusal, through the routes of every protocol --------------------------------------

TIMEOUT = 10  # GEN_SYNC_TIMEOUT of these tests: 12.5 s is the most an estimate may say
# Far past it from any measurement of the tiny model: 1,024 times a 64x64 image's pixels.
TOO_LONG = {"steps": 100, "size": "2048x2048"}


@pytest.fixture
def queue(hub, share: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> JobQueue:
    """A queue on a model loaded after it was made: counted at that load, at the pace
    measured there (no GEN_THROUGHPUT)."""
    with override_settings(GEN_SYNC_TIMEOUT=TIMEOUT):
        yield loaded_queue(hub, share, tmp_path, monkeypatch)


def loaded_queue(hub, share: Path, tmp_path: Path, monkeypatch, throughput: float = 0.0):
    loader = new_loader(hub, share, tmp_path / "cache")
    queue = serve(loader, tmp_path / "images", monkeypatch, throughput=throughput)
    assert loader.pull()
    assert wait_for(loader, {"ready", "failed"}) == "ready", loader.status()
    return queue


def estimate_of(client: Client, **fields) -> dict:
    answer = client.get("/generate/estimate", fields)
    assert answer.status_code == 200, answer.content
    return answer.json()


def test_before_any_image_the_estimate_is_the_models_counted_work(queue):
    """Nothing measured yet: the model's work counted over this machine's pace, measured for
    real at the load (no GEN_THROUGHPUT: imagegen/generation/work.py), for a named size and
    for the model's own."""
    client = Client()
    found = estimate_of(client, **TOO_LONG)
    assert found["counted"] is True and 0 < found["seconds"] < math.inf
    assert (found["size"], found["measured_size"]) == ("2048x2048", "64x64")
    assert "counted over this machine's pace: nothing measured yet" in found["message"]
    own_size = estimate_of(client)  # no size: the model's own, from its configs
    assert own_size["counted"] is True and own_size["size"] == "64x64"
    assert found["limit_seconds"] == TIMEOUT * 1.25
    # The fields take /generate's rules: a bad one is a 400 naming it.
    bad = client.get("/generate/estimate", {"size": "65x64", "steps": "0"})
    assert bad.status_code == 400
    assert {d["field"] for d in bad.json()["error"]["details"]} == {"size", "steps"}


def test_with_nothing_measured_nor_counted_nothing_is_refused(hub, share, tmp_path, monkeypatch):
    """The model not on the share yet: nothing to count, no estimate, nothing refused."""
    serve(new_loader(hub, share, tmp_path / "cache"), tmp_path / "images", monkeypatch)
    client = Client()
    with override_settings(GEN_SYNC_TIMEOUT=TIMEOUT):
        found = estimate_of(client, **TOO_LONG)
        own_size = estimate_of(client)
    assert found["seconds"] is None and found["refused"] is False
    assert found["message"].startswith("No estimate yet: nothing has been measured here")
    assert own_size["refused"] is False
    assert own_size["message"].startswith("No estimate yet: no image of the model's own size")


def refusal_message(message: str) -> None:
    """What the 400 says: the estimate, the limit and what to do."""
    assert message.startswith("This request would take about ")
    assert "100 steps at 2048x2048" in message
    limit = f"past the 12.5 s a synchronous request may take (1.25 x GEN_SYNC_TIMEOUT, {TIMEOUT} s)"
    assert limit in message
    assert "async=true" in message and "fewer steps" in message and "smaller size" in message


def test_a_request_past_the_limit_is_refused_at_once_on_every_synchronous_route(queue):
    client = Client()
    made = client.post("/generate", {"prompt": "measured", "size": "64x64", "steps": "2"})
    assert made.status_code == 200  # taken: its own estimate is within the limit
    found = estimate_of(client, **TOO_LONG)
    assert found["refused"] is True and found["seconds"] > TIMEOUT * 1.25
    assert (found["size"], found["measured_size"], found["steps"]) == ("2048x2048", "64x64", 100)
    refusal_message(found["message"])
    assert f"about {math.ceil(found['seconds'])} s here" in found["message"]

    native = client.post("/generate", {"prompt": "too long", **TOO_LONG})
    assert native.status_code == 400
    assert native.json() == {"error": {"message": found["message"]}}

    openai = client.post(
        "/v1/images/generations",
        {"prompt": "too long", "size": "2048x2048", "steps": 100},
        content_type="application/json",
    )
    assert openai.status_code == 400
    assert openai.json() == {"error": {"message": found["message"], "type":
                             "invalid_request_error", "param": None, "code": None}}  # fmt: skip
    assert openai["x-should-retry"] == "false"  # a retry would be refused the same

    a1111 = client.post(
        "/sdapi/v1/txt2img",
        {"prompt": "too long", "width": 2048, "height": 2048, "steps": 100},
        content_type="application/json",
    )
    assert a1111.status_code == 400
    assert a1111.json() == {"error": {"message": found["message"]}}
    # Nothing of them was queued: the one job is the measured one.
    assert [job.parameters.prompt for job in queue.recent(10)] == ["measured"]

    with override_settings(GEN_SYNC_REFUSE_FACTOR=0):  # none refused: each waits, as before
        taken = estimate_of(client, **TOO_LONG)
    assert taken["refused"] is False and taken["limit_seconds"] is None
    assert taken["seconds"] == found["seconds"]
    seconds = math.ceil(found["seconds"])
    assert taken["message"] == (
        f"About {seconds} s (100 steps at 2048x2048: {seconds} s; scaled from 64x64 by its pixels)"
    )


def test_a_request_of_several_images_is_refused_when_together_they_are_past_the_limit(queue):
    """OpenAI's n: one image would be taken, two are refused as a whole."""
    client = Client()
    assert client.post("/generate", {"prompt": "measured", "size": "64x64"}).status_code == 200
    one = estimate_of(client, **TOO_LONG)["seconds"]  # minutes, from any measurement here
    # A GEN_SYNC_TIMEOUT whose limit (1.25 times it) is half an image past one image.
    with override_settings(GEN_SYNC_TIMEOUT=math.ceil(1.5 * one / 1.25)):
        single, double = (estimate_of(client, **TOO_LONG, n=n) for n in (1, 2))
        assert not single["refused"] and double["refused"], (single, double)
        assert double["seconds"] == pytest.approx(2 * single["seconds"], abs=0.2)
        assert "2 images of 100 steps at 2048x2048" in double["message"]
        body = {"prompt": "two too many", "size": "2048x2048", "steps": 100, "n": 2}
        refused = client.post("/v1/images/generations", body, content_type="application/json")
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == double["message"]
    assert [job.parameters.prompt for job in queue.recent(10)] == ["measured"]


def test_an_asynchronous_request_is_taken_whatever_its_estimate(queue):
    client = Client()
    assert client.post("/generate", {"prompt": "measured", "size": "64x64"}).status_code == 200
    assert estimate_of(client, **TOO_LONG)["refused"] is True
    # Behind a job of its own, so that the long one waits in the queue and never runs here.
    ahead = client.post("/generate", {"prompt": "ahead", "steps": "100", "async": "true"})
    taken = client.post("/generate", {"prompt": "async, too long", **TOO_LONG, "async": "true"})
    assert taken.status_code == 202, taken.content
    assert taken.json()["state"] == "queued"
    for job in (taken, ahead):
        assert client.delete(f"/jobs/{job.json()['id']}").status_code == 200


def test_an_edit_is_estimated_at_its_images_size_with_its_strengths_steps_and_encode(
    hub, share, tmp_path, monkeypatch
):
    """image_size: the size an edit works at when none is named (each side down to a multiple
    of 8); strength: the steps it runs; its input's encode counted on top (at a pace of 1
    MFLOP/s, so that the tiny model's encode shows in tenths of a second)."""
    loaded_queue(hub, share, tmp_path, monkeypatch, throughput=1e6)
    client = Client()
    edit = estimate_of(client, steps=8, strength=0.5, image_size="257x199")
    assert (edit["size"], edit["steps"]) == ("256x192", 4)
    plain = estimate_of(client, steps=4, size="256x192")
    assert edit["seconds"] > plain["seconds"]  # the encode of its input
    assert estimate_of(client, steps=8, image_size="256x192")["steps"] == 6  # strength 0.75
    named = estimate_of(client, steps=8, strength=0.5, image_size="256x192", size="64x64")
    assert named["size"] == "64x64"  # a size sent is the one it works at
    alone = client.get("/generate/estimate", {"strength": "0.5"})
    assert alone.status_code == 400
    assert alone.json()["error"]["details"][0]["field"] == "strength"
    bad = client.get("/generate/estimate", {"image_size": "0x5", "strength": "2"})
    assert bad.status_code == 400
    assert {d["field"] for d in bad.json()["error"]["details"]} == {"image_size", "strength"}


def test_an_edits_input_encode_is_counted_once():
    """The counted encode of an edit's input is added to a basis that has none (the counted
    figures, a text-to-image measurement), not to a measured edit's, whose encode holds it."""
    counted = Timing(width=64, height=64, encode_seconds=1.0, step_seconds=2.0,
                     decode_seconds=3.0, image_encode_seconds=5.0)  # fmt: skip
    edit = request(steps=4).model_copy(update={"edit": EditRequest(source="0" * 64, strength=0.5)})
    only_counted = Measurements(timings=(), native=None, counted=counted)
    assert alone(only_counted, edit).seconds == 1 + 5 + 2 * 2 + 3
    text_measured = Measurements(timings=(AT_64,), native=None, counted=counted)
    assert alone(text_measured, edit).seconds == 1 + 5 + 2 * 2 + 3
    at_64_edit = Timing(width=64, height=64, encode_seconds=6.0, step_seconds=2.0,
                        decode_seconds=3.0, edit=True)  # fmt: skip
    edit_measured = Measurements(timings=(at_64_edit,), native=None, counted=counted)
    assert alone(edit_measured, edit).seconds == 6 + 2 * 2 + 3
    # Kept with a text-to-image image at its size, the faster encode is the one that counts.
    book = LocalTimings()
    book.record(at_64_edit, native=False)
    assert book.measurements().timings[0].edit
    book.record(AT_64, native=False)
    assert not book.measurements().timings[0].edit


def test_an_edit_is_measured_as_one():
    base = record(guidance=7.0)
    assert not measured(base, home="cpu").edit
    source = InputLink(sha256="0" * 64, url="/images/inputs/0")
    edit = EditParameters(source=source, mask=None, strength=0.5, mask_blur=4, steps_run=2)
    parameters = base.parameters.model_copy(update={"edit": edit})
    assert measured(base.model_copy(update={"parameters": parameters}), home="cpu").edit
