"""webuiapi, unchanged, against the service with API_TOKEN set (HTTP Basic, the token as the
password): txt2img, progress, interrupt and skip of this client's jobs only, models and
options."""

import base64
import io
import json
import threading

import pytest
import requests
import webuiapi
from PIL import Image

from tests.imagegen.api.clients.conftest import BEARER, TOKEN, jobs, settle, wait_until
from tests.support.processes import AppServer

LONG = {"steps": 400, "width": 128, "height": 128}  # a minute or more: stopped long before


def webui(app: AppServer, username: str = "webui", password: str = TOKEN, **headers: str):
    api = webuiapi.WebUIApi(baseurl=app.url("/sdapi/v1"), username=username, password=password)
    api.session.headers.update(headers)
    return api


class Background:
    """A txt2img call in a thread, as a UI makes it while it polls /progress."""

    def __init__(self, api: webuiapi.WebUIApi, **fields) -> None:
        self.result = self.error = None
        self.thread = threading.Thread(target=self._run, args=(api, fields))
        self.thread.start()

    def _run(self, api, fields) -> None:
        try:
            self.result = api.txt2img(**fields)
        except Exception as error:
            self.error = error

    def join(self):
        self.thread.join(60)
        assert not self.thread.is_alive()
        if self.error:
            raise self.error
        return self.result


@pytest.mark.both_modes
def test_txt2img_answers_images_parameters_and_info(app):
    result = webui(app).txt2img(
        prompt="webui harbour", negative_prompt="people", seed=7, steps=3, cfg_scale=5,
        width=72, height=64, batch_size=2, n_iter=1,
        override_settings={"CLIP_stop_at_last_layers": 2},
    )  # fmt: skip
    assert [image.size for image in result.images] == [(72, 64), (72, 64)]
    info = result.info
    assert info["seed"] == 7 and info["all_seeds"] == [7, 8]
    assert info["all_prompts"] == ["webui harbour"] * 2
    assert info["infotexts"][1].startswith("webui harbour\nNegative prompt: people\nSteps: 3")
    assert "Seed: 8, Size: 72x64" in info["infotexts"][1]
    assert result.parameters["steps"] == 3 and result.parameters["cfg_scale"] == 5
    found = sorted(jobs(app, "webui harbour"), key=lambda j: j["parameters"]["seed"])
    assert [(j["state"], j["parameters"]["seed"]) for j in found] == [
        ("succeeded", 7),
        ("succeeded", 8),
    ]
    # webuiapi sent its defaults unasked: sampler "Euler a", scheduler "automatic"; what ran
    # is named as A1111 names it
    assert {j["parameters"]["scheduler"] for j in found} == {"Euler a"}
    assert info["sampler_name"] == "Euler a" and "Sampler: Euler a," in info["infotexts"][0]


def test_a1111_sampler_names_map_onto_the_services_schedulers(app):
    karras = requests.post(
        app.url("/sdapi/v1/txt2img"), headers=BEARER,
        json={"prompt": "k", "steps": 2, "sampler_name": "DPM++ 2M Karras", "width": 64},
    )  # fmt: skip
    assert karras.status_code == 200, karras.text
    infotext = json.loads(karras.json()["info"])["infotexts"][0]
    assert "Sampler: DPM++ 2M, Schedule type: Karras" in infotext
    unknown = requests.post(
        app.url("/sdapi/v1/txt2img"), headers=BEARER,
        json={"prompt": "u", "sampler_name": "Restart"},
    )  # fmt: skip
    assert unknown.status_code == 400
    assert "sampler_name" in unknown.json()["error"]["message"]
    assert "Euler a" in unknown.json()["error"]["message"]  # the accepted names are listed


@pytest.mark.both_modes
def test_progress_follows_this_clients_job_and_interrupt_stops_it(app):
    api = webui(app)
    idle = api.get_progress()
    assert idle["progress"] == 0 and idle["state"]["job_count"] == 0
    call = Background(api, prompt="webui long", batch_size=2, **LONG)
    seen = wait_until(lambda: (p := api.get_progress())["state"]["sampling_step"] >= 2 and p)
    assert seen["state"]["job_count"] == 2 and seen["state"]["job_no"] == 0
    assert seen["state"]["sampling_steps"] == 400  # as asked, not PNDM's 401 timesteps
    assert 0 < seen["progress"] < 0.5 and seen["eta_relative"] > 0
    assert seen["textinfo"] == "denoising"

    assert api.interrupt() == {}
    result = call.join()  # A1111 answers what was finished: nothing here
    assert result.images == [] and result.info["all_seeds"] == []
    assert {j["state"] for j in jobs(app, "webui long")} == {"cancelled"}
    after = api.get_progress()
    assert after["progress"] == 0 and after["state"]["job_count"] == 0  # util_wait_for_ready


@pytest.mark.both_modes
def test_progress_shows_the_running_jobs_latest_preview_unless_skipped(app):
    api = webui(app)
    assert api.get_progress()["current_image"] is None  # nothing under way
    call = Background(api, prompt="webui preview", **LONG)
    seen = wait_until(lambda: (p := api.get_progress())["current_image"] and p)
    image = Image.open(io.BytesIO(base64.b64decode(seen["current_image"])))
    assert image.format == "JPEG" and max(image.size) <= LONG["width"] // 4
    url = app.url("/sdapi/v1/progress")
    skipped = api.session.get(url, params={"skip_current_image": "true"}).json()
    assert skipped["current_image"] is None and skipped["state"]["sampling_step"] >= 1
    api.interrupt()
    call.join()


@pytest.mark.parametrize(
    ("mine", "theirs"),
    [
        ({"username": "alice"}, {"username": "bob"}),  # another credential
        ({"X-Forwarded-For": "203.0.113.7"}, {"X-Forwarded-For": "203.0.113.8"}),  # address
    ],
)
def test_interrupt_never_stops_another_clients_job(app, mine, theirs):
    me, other = webui(app, **mine), webui(app, **theirs)
    prompt = f"webui mine {sorted(mine.items())}"
    call = Background(me, prompt=prompt, **LONG)
    wait_until(lambda: me.get_progress()["state"]["sampling_step"] >= 1)
    assert other.get_progress()["state"]["job_count"] == 0  # it sees only its own
    other.interrupt()
    other.skip()
    step = me.get_progress()["state"]["sampling_step"]
    wait_until(lambda: me.get_progress()["state"]["sampling_step"] > step + 1)
    (job,) = jobs(app, prompt)
    assert job["state"] == "running"
    me.interrupt()
    assert call.join().images == []
    assert jobs(app, prompt)[0]["state"] == "cancelled"


def test_a_forwarded_address_from_an_untrusted_peer_changes_nothing(open_app):
    """The open app trusts no proxy: a made-up X-Forwarded-For is the same client."""
    me = webui(open_app, **{"X-Forwarded-For": "203.0.113.7"})
    other = webui(open_app, **{"X-Forwarded-For": "203.0.113.8"})
    call = Background(me, prompt="webui spoof", **LONG)
    wait_until(lambda: me.get_progress()["state"]["sampling_step"] >= 1)
    assert other.get_progress()["state"]["job_count"] == 1
    other.interrupt()
    assert call.join().images == []
    settle(open_app)


@pytest.mark.both_modes
def test_skip_stops_the_running_image_and_the_batch_goes_on(app):
    api = webui(app)
    # 60 steps: a second or more on a warm worker, so the skip finds the first image running
    call = Background(api, prompt="webui skip", batch_size=2, seed=100, steps=60, width=64,
                      height=64)  # fmt: skip
    wait_until(lambda: api.get_progress()["state"]["sampling_step"] >= 1)
    assert api.skip() == {}
    result = call.join()
    assert result.info["all_seeds"] == [101] and len(result.images) == 1
    by_seed = {j["parameters"]["seed"]: j["state"] for j in jobs(app, "webui skip")}
    assert by_seed == {100: "cancelled", 101: "succeeded"}


def test_models_options_and_the_lists_clients_read(app):
    api = webui(app)
    assert [m["title"] for m in api.get_sd_models()] == ["testorg/tiny-sd"]
    api.util_set_model("testorg/tiny-sd")
    api.util_set_model("tiny")  # webuiapi picks the closest title and sets it
    assert api.util_get_current_model() == "testorg/tiny-sd"
    options = {"sd_model_checkpoint": "testorg/tiny-sd", "sd_vae": "Automatic"}
    assert api.set_options(options) is None  # A1111 answers null
    other = {"sd_model_checkpoint": "sdxl.safetensors"}
    refused = api.session.post(app.url("/sdapi/v1/options"), json=other)
    assert refused.status_code == 400
    assert refused.json()["error"]["details"] == [{
        "field": "sd_model_checkpoint",
        "message": "'sdxl.safetensors' is not offered; offered: testorg/tiny-sd",
    }]  # fmt: skip
    assert {"Euler a", "DPM++ 2M", "LCM"} <= {s["name"] for s in api.get_samplers()}
    assert "Karras" in {s["label"] for s in api.get_schedulers()}
    assert [u["name"] for u in api.get_upscalers()] == ["Lanczos", "Nearest"]  # no UPSCALERS
    assert [m["name"] for m in api.get_latent_upscale_modes()][:2] == [
        "Latent", "Latent (antialiased)"
    ]  # fmt: skip
    for read in (api.get_sd_vae, api.get_loras):
        assert read() == []


def test_an_empty_body_takes_this_services_defaults(app):
    response = requests.post(app.url("/sdapi/v1/txt2img"), json={}, headers=BEARER)
    assert response.status_code == 200, response.text
    parameters = response.json()["parameters"]
    assert parameters["steps"] == 2  # GEN_DEFAULT_STEPS, not A1111's 50
    assert (parameters["width"], parameters["height"]) == (64, 64)  # the model's native size
    assert len(response.json()["images"]) == 1


@pytest.mark.parametrize(("username", "password"), [(None, None), ("webui", "wrong")])
def test_without_the_token_txt2img_is_refused(app, username, password):
    api = webuiapi.WebUIApi(baseurl=app.url("/sdapi/v1"), username=username, password=password)
    with pytest.raises(RuntimeError) as refused:
        api.txt2img(prompt="webui refused", steps=1, width=64, height=64)
    assert refused.value.args[0] == 401
    for headers in ({}, {"Authorization": "Basic "}, {"Authorization": TOKEN}):
        refusal = requests.get(app.url("/sdapi/v1/progress"), headers=headers)
        assert refusal.status_code == 401
        # Bearer alone is offered: a Basic challenge makes a browser ask for a password and
        # then send it with every request here, another site's too. The message names Basic.
        assert refusal.headers["WWW-Authenticate"] == "Bearer"
        assert "Basic" in refusal.json()["error"]["message"]
    assert jobs(app, "webui refused") == []


def test_the_token_as_a_bearer_token_works_too(app):
    response = requests.get(app.url("/sdapi/v1/options"), headers=BEARER)
    assert response.status_code == 200
