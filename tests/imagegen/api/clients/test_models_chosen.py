"""A model chosen per request through the real clients: the openai SDK's
images.generate(model=...) and images.edit(model=...), webuiapi's txt2img and img2img with
override_settings={"sd_model_checkpoint": ...}. The chosen model runs (its answer, its record
and its PNG's infotext say so) and makes the same bytes as that model served alone, where any
name runs MODEL_ID; OpenAI's own names run the default; an unknown name is a 400 naming the
field, a model not on the share the 409, nothing queued for either, in distributed mode too. In
process (served_here; the SDK over WSGI,
webuiapi over a loopback port): MODEL_ID the tiny SD model, MODELS the tiny SDXL one (pulled)
and the tiny inpainting checkpoint (never pulled)."""

import base64
import io
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import requests
import webuiapi
from django.test import override_settings
from PIL import Image

from tests.support.distributed import replica_here
from tests.support.in_process import LoopbackApp, openai_client, served_here
from tests.support.local_hub import LocalHub
from tests.support.model_service import (
    PULL_TIMEOUT,
    SD_INPAINT_REPO,
    SD_REPO,
    SDXL_REPO,
    model_service_env,
    pull_until_ready,
)

# Every value the two models' defaults could differ on, sent (SDXL as a MODELS entry has its
# preset's default steps, as MODEL_ID the test service's GEN_DEFAULT_STEPS).
OPENAI = {"prompt": "a red cube", "size": "64x64",
          "extra_body": {"seed": 7, "steps": 2, "guidance_scale": 5}}  # fmt: skip
A1111 = {"prompt": "a red cube", "seed": 7, "steps": 2, "cfg_scale": 5, "width": 64, "height": 64}
CHECKPOINT = "override_settings.sd_model_checkpoint"


@pytest.fixture(scope="module")
def hub_url(hub_root: Path) -> Iterator[str]:
    with LocalHub(hub_root) as hub:
        yield hub.url


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models-chosen")


def env(hub_url: str, work: Path) -> dict[str, str]:
    return model_service_env(hub_url, work / "share", work)


@pytest.fixture(scope="module")
def app(hub_url: str, work: Path) -> Iterator[LoopbackApp]:
    """MODEL_ID and the SDXL entry pulled and loaded; the inpainting entry never pulled."""
    with served_here(**env(hub_url, work), MODELS=f"{SDXL_REPO},{SD_INPAINT_REPO}") as served:
        pull_until_ready(served)
        pulled = requests.post(served.url("/model/pull"), data={"model": SDXL_REPO}, timeout=30)
        assert pulled.status_code in (200, 202), pulled.text
        deadline = time.monotonic() + PULL_TIMEOUT["in-process"]
        while (sdxl := model_state(served, SDXL_REPO)) not in ("ready", "failed"):
            assert time.monotonic() < deadline, sdxl
            time.sleep(0.05)
        assert sdxl == "ready"
        yield served


def model_state(app: LoopbackApp, model_id: str) -> str:
    models = requests.get(app.url("/model/status"), timeout=30).json()["models"]
    return next(m["state"] for m in models if m["id"] == model_id)


def client() -> openai.OpenAI:
    return openai_client(api_key="unused", max_retries=0)


def webui(app: LoopbackApp) -> webuiapi.WebUIApi:
    return webuiapi.WebUIApi(baseurl=app.url("/sdapi/v1"))


def openai_png(answer) -> bytes:
    return base64.b64decode(answer.data[0].b64_json)


def a1111_png(result) -> bytes:
    return base64.b64decode(result.json["images"][0])


def infotext(png: bytes) -> str:
    return Image.open(io.BytesIO(png)).text["parameters"]


def jobs(app: LoopbackApp) -> list[dict]:
    return requests.get(app.url("/jobs"), params={"limit": 200}, timeout=30).json()


def newest_job(app: LoopbackApp) -> dict:
    return jobs(app)[0]


def test_openai_generate_and_edit_run_the_model_named_and_say_so(app):
    """By unique name part or repo id (any case); the record and the infotext name it, and
    OpenAI's own names, like none, run MODEL_ID."""
    made = client().images.generate(model="tiny-sdxl", **OPENAI)
    png = openai_png(made)
    assert f"Model: {SDXL_REPO}, Model hash: " in infotext(png)
    record = newest_job(app)
    assert record["parameters"]["model"] == SDXL_REPO
    assert record["image"]["parameters"]["model_id"] == SDXL_REPO

    streamed = list(client().images.generate(model="tiny-sdxl", stream=True, **OPENAI))
    assert streamed[-1].type == "image_generation.completed"
    assert base64.b64decode(streamed[-1].b64_json) == png

    edited = client().images.edit(
        model=SDXL_REPO.upper(), image=("in.png", png, "image/png"), prompt="a blue cube",
        extra_body={"seed": 7, "steps": 2, "guidance_scale": 5, "strength": 0.5},
    )  # fmt: skip
    assert f"Model: {SDXL_REPO}, Model hash: " in infotext(openai_png(edited))
    assert newest_job(app)["image"]["parameters"]["model_id"] == SDXL_REPO

    default = openai_png(client().images.generate(**OPENAI))
    assert f"Model: {SD_REPO}, Model hash: " in infotext(default)
    for hard_coded in ("dall-e-3", "dall-e-2", "gpt-image-1"):
        assert openai_png(client().images.generate(model=hard_coded, **OPENAI)) == default
    assert "model" not in newest_job(app)["parameters"]  # absent: MODEL_ID ran
    edit_default = client().images.edit(
        model="gpt-image-1", image=("in.png", png, "image/png"), prompt="a blue cube",
        extra_body={"seed": 7, "steps": 2, "strength": 0.5},
    )  # fmt: skip
    assert f"Model: {SD_REPO}, Model hash: " in infotext(openai_png(edit_default))


def test_openai_unknown_model_is_a_400_and_one_not_on_the_share_a_409_nothing_queued(app):
    before = jobs(app)
    with pytest.raises(openai.BadRequestError) as unknown:
        client().images.generate(model="sdxl-turbo", **OPENAI)
    error = unknown.value.body
    assert error["param"] == "model"
    assert error["message"] == (
        f"Invalid request: model: 'sdxl-turbo' is not offered; offered: {SD_REPO}, "
        f"{SDXL_REPO}, {SD_INPAINT_REPO}"
    )
    with pytest.raises(openai.BadRequestError) as unknown_edit:
        client().images.edit(
            model="sdxl-turbo", image=("in.png", tiny_png(), "image/png"), prompt="x"
        )
    assert unknown_edit.value.body["param"] == "model"
    with pytest.raises(openai.ConflictError) as not_pulled:
        client().images.generate(model="tiny-sd-inpainting", **OPENAI)
    assert not_pulled.value.body["message"].startswith(
        f"The model {SD_INPAINT_REPO} is offered but not on the share yet: POST "
        f"/model/pull?model={SD_INPAINT_REPO}"
    )
    assert jobs(app) == before


def test_webuiapi_override_checkpoint_picks_the_model_of_that_request_alone(app):
    """A title as /sd-models lists it, a model name or a repo id; `info` names the model that
    ran and its hash as /sd-models gives it; the next request naming none runs MODEL_ID."""
    api = webui(app)
    listed = {m["title"]: m for m in api.get_sd_models()}
    titled = api.txt2img(**A1111, override_settings={"sd_model_checkpoint": SDXL_REPO})
    assert titled.info["sd_model_name"] == SDXL_REPO
    assert titled.info["sd_model_hash"] == listed[SDXL_REPO]["hash"]
    assert titled.info["infotexts"][0].endswith(
        f"Model: {SDXL_REPO}, Model hash: {listed[SDXL_REPO]['hash']}"
    )
    assert f"Model: {SDXL_REPO}, " in infotext(a1111_png(titled))
    assert newest_job(app)["image"]["parameters"]["model_id"] == SDXL_REPO
    named = api.txt2img(**A1111, override_settings={"sd_model_checkpoint": "tiny-sdxl"})
    assert a1111_png(named) == a1111_png(titled)

    plain = api.txt2img(**A1111)
    assert plain.info["sd_model_name"] == SD_REPO and a1111_png(plain) != a1111_png(titled)

    edited = api.img2img(
        images=[titled.image], **A1111, denoising_strength=0.5,
        override_settings={"sd_model_checkpoint": "tiny-sdxl"},
    )  # fmt: skip
    assert edited.info["sd_model_name"] == SDXL_REPO
    assert newest_job(app)["image"]["parameters"]["model_id"] == SDXL_REPO


def test_an_unknown_checkpoint_is_a_400_naming_the_field_nothing_queued(app):
    before = jobs(app)
    for route in ("txt2img", "img2img"):
        body = {**A1111, "override_settings": {"sd_model_checkpoint": "v1-5-pruned.safetensors"}}
        if route == "img2img":
            body["init_images"] = [base64.b64encode(tiny_png()).decode()]
        refused = requests.post(app.url(f"/sdapi/v1/{route}"), json=body, timeout=60)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["details"] == [{
            "field": CHECKPOINT,
            "message": f"'v1-5-pruned.safetensors' is not offered; offered: {SD_REPO}, "
            f"{SDXL_REPO}, {SD_INPAINT_REPO}",
        }]  # fmt: skip
    with pytest.raises(RuntimeError, match="400"):  # webuiapi's own refusal
        webui(app).txt2img(**A1111, override_settings={"sd_model_checkpoint": "nope"})
    assert jobs(app) == before


def test_a_chosen_model_makes_the_same_bytes_as_served_alone_where_any_name_runs_model_id(
    app, hub_url, work
):
    """SDXL chosen here and SDXL as MODEL_ID with MODELS unset: the same PNGs, through each
    client; there any model name, and any checkpoint, runs MODEL_ID, as before."""
    chosen_openai = openai_png(client().images.generate(model=SDXL_REPO, **OPENAI))
    chosen_a1111 = a1111_png(
        webui(app).txt2img(**A1111, override_settings={"sd_model_checkpoint": "tiny-sdxl"})
    )
    # MODELS unset: served_here changes only what differs from this process's settings, so
    # the module app's MODELS is cleared here.
    unset = override_settings(MODELS="")
    with unset, served_here(**{**env(hub_url, work), "MODEL_ID": SDXL_REPO}) as alone:
        assert alone.backend and not alone.backend.offered().several
        pull_until_ready(alone)
        for name in ("tiny-sd", "sdxl-turbo", "dall-e-3"):
            made = client().images.generate(model=name, **OPENAI)
            assert openai_png(made) == chosen_openai, name
        result = webui(alone).txt2img(
            **A1111, override_settings={"sd_model_checkpoint": "v1-5-pruned.safetensors"}
        )
        assert result.info["sd_model_name"] == SDXL_REPO
        assert a1111_png(result) == chosen_a1111


def test_in_distributed_mode_a_models_entry_reaches_the_board_as_in_process(
    hub_url, work, redis_server
):
    """A share of its own with nothing on it: the entry named through either client is the
    409 naming it (the board checks its own copy), an unknown name the 400."""
    settings = {
        **env(hub_url, work / "distributed"), "JOB_BROKER_URL": redis_server.url,
        "MODELS": SDXL_REPO,
        "GEN_SYNC_TIMEOUT": "10",  # a request queued by mistake answers 504 soon: no worker
    }  # fmt: skip
    with replica_here(**settings) as replica:
        with pytest.raises(openai.APIStatusError) as refused:
            client().images.generate(model="tiny-sdxl", **OPENAI)
        assert refused.value.status_code == 409
        assert f"The model {SDXL_REPO} is offered but not on the share" in str(refused.value.body)
        with pytest.raises(openai.BadRequestError):
            client().images.generate(model="nope", **OPENAI)
        answer = requests.post(
            replica.url("/sdapi/v1/txt2img"),
            json={**A1111, "override_settings": {"sd_model_checkpoint": SDXL_REPO}}, timeout=60,
        )  # fmt: skip
        assert answer.status_code == 409, answer.text


def tiny_png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (64, 64), (200, 30, 30)).save(buffer, format="PNG")
    return buffer.getvalue()
