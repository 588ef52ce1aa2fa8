"""What A1111 clients send and read beyond webuiapi's calls, as their code does it: SillyTavern
stops its user's generation with a POST to /sdapi/v1/interrupt that has no body and no content
type (as webuiapi's interrupt and skip do); LibreChat reads txt2img's `info` as JSON and takes
`infotexts[0]`'s last line, `seed`, `width` and `height` from it. What the job mode changes
beneath an interrupt or a skip is tested in both modes with webuiapi's calls, which send the
same bodyless POSTs (test_webuiapi.py)."""

import base64
import io
import json
import re
import threading

import requests
from PIL import Image

from tests.imagegen.api.clients.conftest import TOKEN, jobs, wait_until
from tests.support.processes import AppServer

# SillyTavern's "API Auth" setting, `user:password`, sent as HTTP Basic.
BASIC = {"Authorization": "Basic " + base64.b64encode(f"tavern:{TOKEN}".encode()).decode()}
LONG = {"steps": 400, "width": 128, "height": 128}  # minutes: stopped long before


def txt2img_in_background(app: AppServer, prompt: str) -> tuple[threading.Thread, list]:
    answers: list = []
    body = {"prompt": prompt, **LONG}
    thread = threading.Thread(target=lambda: answers.append(
        requests.post(app.url("/sdapi/v1/txt2img"), json=body, headers=BASIC, timeout=120)
    ))  # fmt: skip
    thread.start()
    wait_until(lambda: any(job["state"] == "running" for job in jobs(app, prompt)))
    return thread, answers


def test_sillytaverns_bodyless_interrupt_cancels_that_callers_job(app):
    thread, answers = txt2img_in_background(app, "tavern long")
    interrupt = requests.Request("POST", app.url("/sdapi/v1/interrupt"), headers=BASIC).prepare()
    assert interrupt.body is None and "Content-Type" not in interrupt.headers  # exactly that
    with requests.Session() as session:
        answered = session.send(interrupt)
    assert answered.status_code == 200 and answered.json() == {}
    thread.join(60)
    (answer,) = answers
    assert answer.status_code == 200 and answer.json()["images"] == []  # A1111: none finished
    assert {job["state"] for job in jobs(app, "tavern long")} == {"cancelled"}


def test_webuiapis_bodyless_skip_stops_that_callers_running_job(app):
    thread, answers = txt2img_in_background(app, "tavern skipped")
    skip = requests.Request("POST", app.url("/sdapi/v1/skip"), headers=BASIC).prepare()
    assert skip.body is None and "Content-Type" not in skip.headers  # as webuiapi sends it
    with requests.Session() as session:
        answered = session.send(skip)
    assert answered.status_code == 200 and answered.json() == {}
    thread.join(60)
    (answer,) = answers
    assert answer.status_code == 200 and answer.json()["images"] == []
    assert {job["state"] for job in jobs(app, "tavern skipped")} == {"cancelled"}


def test_a_get_to_interrupt_is_refused_and_stops_nothing(app):
    """A1111 takes POST only, and so does this service: a GET that cancelled would let any
    page (an <img> tag) stop a user's jobs with the credentials the browser keeps for it, and
    the cross-site Origin check covers state-changing methods only."""
    thread, _answers = txt2img_in_background(app, "tavern get")
    refused = requests.get(app.url("/sdapi/v1/interrupt"), headers=BASIC)
    assert refused.status_code == 405 and refused.headers["Allow"] == "POST"
    assert "allowed: POST" in refused.json()["error"]["message"]
    (job,) = jobs(app, "tavern get")
    step = job["progress"]["step"]
    wait_until(lambda: jobs(app, "tavern get")[0]["progress"]["step"] > step)  # it runs on
    requests.post(app.url("/sdapi/v1/interrupt"), headers=BASIC)
    thread.join(60)


def librechat_reads(data: dict) -> dict:
    """What LibreChat's StableDiffusion tool keeps of a txt2img answer: `info` parsed as
    JSON, the last line of `infotexts[0]` (the generation's parameters), its `seed`, `width`
    and `height`, and the image's bytes from `images[0]` before any comma."""
    info = json.loads(data["info"])
    return {
        "buffer": base64.b64decode(data["images"][0].split(",", 1)[0]),
        "height": info["height"],
        "width": info["width"],
        "seed": info["seed"],
        "info": info["infotexts"][0].split("\n").pop(),
        "parameters": info["infotexts"][0],
    }


def test_librechats_parser_finds_seed_size_and_the_parameters_line(app):
    # LibreChat's own payload (its sizes 1024 made tiny-model sized).
    payload = {"prompt": "a librechat lighthouse", "negative_prompt": "fog, people",
               "cfg_scale": 4.5, "steps": 22, "width": 64, "height": 72}  # fmt: skip
    answer = requests.post(app.url("/sdapi/v1/txt2img"), json=payload, headers=BASIC)
    assert answer.status_code == 200, answer.text
    read = librechat_reads(answer.json())
    assert (read["width"], read["height"]) == (64, 72)
    assert Image.open(io.BytesIO(read["buffer"])).size == (64, 72)
    assert isinstance(read["seed"], int)
    assert read["info"].startswith("Steps: 22, ")
    assert re.search(rf"(^|, )Seed: {read['seed']}(,|$)", read["info"]), read["info"]
    assert "Size: 64x72" in read["info"] and "CFG scale: 4.5" in read["info"]
    lines = read["parameters"].split("\n")
    assert lines[:2] == ["a librechat lighthouse", "Negative prompt: fog, people"]
