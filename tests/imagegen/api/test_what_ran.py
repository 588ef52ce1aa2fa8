"""What a client reads about what ran, called in process through the real routes on the real
tiny pipeline (its own scheduler is PNDM, as Stable Diffusion ships it): the sampler by
A1111's name wherever it is answered (headers, the record, the job, the PNG, A1111's info),
and progress counted in the steps asked for, not in the scheduler's timesteps."""

import io
import json
from pathlib import Path

import pytest
from django.test import Client
from PIL import Image

from imagegen.generation.jobs import JobQueue
from tests.support.loaders import ready_loader, serve

# Replays a job's events from its first step (an id of this stream: step 0, no status seen).
FROM_THE_START = "0.00000000"


@pytest.fixture
def queue(hub, share: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> JobQueue:
    loader = ready_loader(hub, share, tmp_path / "cache")
    return serve(loader, tmp_path / "images", monkeypatch)


def events(client: Client, job_id: str) -> list[tuple[str, dict]]:
    """Every (name, data) of the job's event stream until its final state, from step 1."""
    answer = client.get(f"/jobs/{job_id}/events", HTTP_LAST_EVENT_ID=FROM_THE_START)
    assert answer.status_code == 200
    text = b"".join(answer.streaming_content).decode()
    found = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in fields:
            found.append((fields["event"], json.loads(fields["data"])))
    return found


def test_the_model_own_scheduler_counts_the_steps_asked_and_is_named_as_a1111_does(queue):
    client = Client()
    fields = {"prompt": "a lighthouse", "steps": "5", "size": "64x64", "seed": "3"}
    started = client.post("/generate", {**fields, "async": "true"})
    assert started.status_code == 202, started.content
    seen = events(client, started.json()["id"])
    # PNDM runs 6 timesteps for 5 steps: the stream says 1 to 5, each once, of 5.
    assert [(data["step"], data["steps"]) for name, data in seen if name == "step"] == [
        (step, 5) for step in range(1, 6)
    ]
    name, job = seen[-1]
    assert name == "succeeded" and (job["progress"]["step"], job["progress"]["steps"]) == (5, 5)
    assert job["parameters"]["scheduler"] is None  # none chosen: the model's own ...
    assert job["image"]["parameters"]["scheduler"] == "PLMS"  # ... which A1111 calls PLMS
    assert job["image"]["parameters"]["steps"] == 5

    answer = client.post("/generate", fields)
    assert answer.status_code == 200, answer.content
    assert (answer["X-Scheduler"], answer["X-Steps"]) == ("PLMS", "5")
    text = Image.open(io.BytesIO(answer.content)).text["parameters"]
    assert "Steps: 5, Sampler: PLMS, CFG scale: 7," in text


def test_a_chosen_scheduler_is_answered_by_a1111s_name_which_is_taken_back(queue):
    client = Client()
    fields = {"prompt": "a lighthouse", "steps": "3", "size": "64x64", "seed": "3"}
    answer = client.post("/generate", {**fields, "scheduler": "euler_trailing"})
    assert answer.status_code == 200, answer.content
    assert answer["X-Scheduler"] == "Euler SGM Uniform"
    record = client.get(f"/images/{answer['X-Image-Id']}").json()
    assert record["parameters"]["scheduler"] == "Euler SGM Uniform"
    job = client.get(f"/jobs/{answer['X-Job-Id']}").json()
    assert job["parameters"]["scheduler"] == "Euler SGM Uniform"
    text = Image.open(io.BytesIO(answer.content)).text
    assert "Sampler: Euler, Schedule type: SGM Uniform," in text["parameters"]
    assert json.loads(text["imagegen"])["scheduler"] == "Euler SGM Uniform"
    # The record's name, sent back (in any case), runs the same scheduler: the same image.
    again = client.post("/generate", {**fields, "scheduler": "euler sgm uniform"})
    assert again.status_code == 200, again.content
    assert again["X-Scheduler"] == "Euler SGM Uniform" and again.content == answer.content


@pytest.mark.parametrize(
    ("sent", "sampler", "infotext"),
    [
        ({}, "PLMS", "Sampler: PLMS,"),  # the model's own
        ({"sampler_name": "Euler a", "scheduler": "automatic"}, "Euler a", "Sampler: Euler a,"),
        ({"sampler_name": "k_euler_a"}, "Euler a", "Sampler: Euler a,"),
        (
            {"sampler_name": "DPM++ 2M Karras"},
            "DPM++ 2M",  # A1111 1.9 and later: the sampler alone, the schedule type apart
            "Sampler: DPM++ 2M, Schedule type: Karras,",
        ),
    ],
)
def test_a1111s_info_names_the_sampler_as_a1111_does(queue, sent, sampler, infotext):
    body = {"prompt": "webui harbour", "steps": 3, "width": 64, "height": 64, **sent}
    answer = Client().post("/sdapi/v1/txt2img", body, content_type="application/json")
    assert answer.status_code == 200, answer.content
    info = json.loads(answer.json()["info"])
    assert info["sampler_name"] == sampler and info["steps"] == 3
    assert infotext in info["infotexts"][0]
