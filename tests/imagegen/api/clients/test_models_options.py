"""A1111's checkpoint switch through webuiapi: util_set_model (POST /sdapi/v1/options with
sd_model_checkpoint) makes the chosen model run the caller's txt2img and img2img that name
none, util_get_current_model (GET /options) answers it, util_wait_for_ready (/progress) waits
for its load. In process the switch loads the model, answering null once loaded or 202 past
GEN_SYNC_TIMEOUT, and a switched-to model makes the same bytes as that model served alone;
per API key where keys are on, the whole service's otherwise. In distributed mode the choice
is kept in Redis, so another replica answers it, and the workers run it.

In process: served here (tests/support/in_process.py), MODEL_ID the tiny SD model, MODELS the
tiny SDXL one and the tiny inpainting checkpoint; both pulled onto the module's share with
manage.py pull_model before any app starts, so each app begins with nothing loaded, and the
inpainting one never pulled. Distributed: a web replica served here on the session's shared
stack (its Redis and worker), reading the module's share, so no process starts."""

import base64
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import webuiapi
from django.test import override_settings

from apikeys import services as keys
from imagegen.model.loader import MODEL_CODE
from scripts.embedded_mongo import EmbeddedMongo
from tests.support.commands import run_command
from tests.support.distributed import replica_here
from tests.support.in_process import LoopbackApp, served_here
from tests.support.key_database import connected_database
from tests.support.local_hub import LocalHub
from tests.support.model_service import (
    SD_INPAINT_REPO,
    SD_REPO,
    SDXL_REPO,
    model_service_env,
    pull_until_ready,
)

A1111 = {"prompt": "a red cube", "seed": 7, "steps": 2, "cfg_scale": 5, "width": 64, "height": 64}
OFFERED = f"{SD_REPO}, {SDXL_REPO}, {SD_INPAINT_REPO}"
POLL = 0.05  # seconds between util_wait_for_ready's looks (its default is 5)


@pytest.fixture(scope="module")
def hub_url(hub_root: Path) -> Iterator[str]:
    with LocalHub(hub_root) as hub:
        yield hub.url


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models-options")


@pytest.fixture(scope="module")
def env(hub_url: str, work: Path) -> dict[str, str]:
    """The module's settings, MODEL_ID and the SDXL entry on the share, nothing loaded."""
    settings = {**model_service_env(hub_url, work / "share", work),
                "MODELS": f"{SDXL_REPO},{SD_INPAINT_REPO}", "GEN_SYNC_TIMEOUT": "120"}  # fmt: skip
    pulled = run_command("pull_model", "--model", SD_REPO, env=settings)
    assert pulled.returncode == 0, pulled.stderr
    pulled = run_command("pull_model", "--model", SDXL_REPO, env=settings)
    assert pulled.returncode == 0, pulled.stderr
    return settings


@pytest.fixture(scope="module")
def secrets(mongo: EmbeddedMongo) -> Iterator[dict[str, str]]:
    """Two ordinary named keys (names of this module's own: the shared stack's Redis keeps
    choices by key name) and the database's URI."""
    with connected_database(mongo, "models-options") as uri:
        yield {
            "alpha": keys.key_create(name="options-alpha").secret,
            "beta": keys.key_create(name="options-beta").secret,
            "uri": uri,
        }


def webui(app: LoopbackApp, secret: str | None = None) -> webuiapi.WebUIApi:
    """webuiapi as a client configures it: a key as its Basic password, when keys are on."""
    if secret is None:
        return webuiapi.WebUIApi(baseurl=app.url("/sdapi/v1"))
    return webuiapi.WebUIApi(baseurl=app.url("/sdapi/v1"), username="me", password=secret)


def png(result: webuiapi.WebUIApiResult) -> bytes:
    return base64.b64decode(result.json["images"][0])


def model_states(app: LoopbackApp) -> dict[str, dict]:
    models = requests.get(app.url("/model/status"), timeout=30).json()["models"]
    return {m["id"]: m for m in models}


def post_options(api: webuiapi.WebUIApi, options: dict) -> requests.Response:
    return api.session.post(f"{api.baseurl}/options", json=options, timeout=120)


def test_a_switch_waits_for_the_load_and_the_switched_model_runs_requests_naming_none(
    env, hub_url, work
):
    """Keys off: the whole service's choice. A load that outlasts GEN_SYNC_TIMEOUT answers 202
    and /progress counts it as a job until it ends (held here by the lock every load takes);
    then txt2img and img2img naming no model run it, the same bytes as that model served alone,
    override_settings still picking the model of its request."""
    with served_here(**env) as app:
        api = webui(app)
        assert api.util_get_current_model() == SD_REPO
        assert model_states(app)[SDXL_REPO]["state"] == "not_started"

        with override_settings(GEN_SYNC_TIMEOUT=1), MODEL_CODE:
            answer = post_options(api, {"sd_model_checkpoint": "tiny-sdxl"})
            assert answer.status_code == 202, answer.text
            assert answer.json()["sd_model_checkpoint"] == SDXL_REPO
            progress = api.get_progress()
            assert progress["state"]["job_count"] == 1 and progress["progress"] == 0
            assert progress["textinfo"] == "loading the model"
            assert api.util_get_current_model() == SDXL_REPO
        waiting = threading.Thread(target=api.util_wait_for_ready, args=(POLL,), daemon=True)
        waiting.start()
        waiting.join(120)
        assert not waiting.is_alive(), "util_wait_for_ready still waits"
        assert model_states(app)[SDXL_REPO]["state"] == "ready"

        switched = api.txt2img(**A1111)
        assert switched.info["sd_model_name"] == SDXL_REPO
        assert f"Model: {SDXL_REPO}, " in switched.info["infotexts"][0]
        hash_ = next(m["hash"] for m in api.get_sd_models() if m["title"] == SDXL_REPO)
        assert switched.info["sd_model_hash"] == hash_
        options = api.get_options()
        assert options["sd_model_checkpoint"] == SDXL_REPO
        assert hash_ and options["sd_checkpoint_hash"].startswith(hash_)  # its commit
        edited = api.img2img(images=[switched.image], **A1111, denoising_strength=0.5)
        assert edited.info["sd_model_name"] == SDXL_REPO
        overridden = api.txt2img(**A1111, override_settings={"sd_model_checkpoint": SD_REPO})
        assert overridden.info["sd_model_name"] == SD_REPO

        # Loaded within GEN_SYNC_TIMEOUT: null, as A1111 answers; nothing left to wait for.
        assert api.util_set_model("testorg/tiny-sd") is None
        assert api.get_progress()["state"]["job_count"] == 0
        assert api.util_get_current_model() == SD_REPO
        default = api.txt2img(**A1111)
        assert default.info["sd_model_name"] == SD_REPO and png(default) == png(overridden)

    alone = {**env, "MODEL_ID": SDXL_REPO}
    with override_settings(MODELS=""), served_here(**alone) as solo:
        pull_until_ready(solo)
        assert png(webui(solo).txt2img(**A1111)) == png(switched)


def test_an_unknown_checkpoint_is_a_400_and_one_not_on_the_share_a_409_nothing_kept(env):
    """The 400 names sd_model_checkpoint and lists the offered ids; the 409 starts no
    download; the choice stays as it was. Other option keys are accepted and ignored."""
    with served_here(**env) as app:
        api = webui(app)
        unknown = post_options(api, {"sd_model_checkpoint": "v1-5-pruned.safetensors"})
        assert unknown.status_code == 400, unknown.text
        assert unknown.json()["error"]["details"] == [{
            "field": "sd_model_checkpoint",
            "message": f"'v1-5-pruned.safetensors' is not offered; offered: {OFFERED}",
        }]  # fmt: skip
        not_pulled = post_options(api, {"sd_model_checkpoint": "tiny-sd-inpainting"})
        assert not_pulled.status_code == 409, not_pulled.text
        assert not_pulled.json()["error"]["message"].startswith(
            f"The model {SD_INPAINT_REPO} is offered but not on the share yet: POST "
            f"/model/pull?model={SD_INPAINT_REPO}"
        )
        inpaint = model_states(app)[SD_INPAINT_REPO]
        assert (inpaint["state"], inpaint["weights_on_share"]) == ("not_started", False)
        assert api.util_get_current_model() == SD_REPO
        assert api.set_options({"sd_vae": "Automatic", "CLIP_stop_at_last_layers": 2}) is None


def test_with_keys_on_each_key_switches_its_own_requests(env, secrets):
    with served_here(**{**env, "API_KEYS": "1", "MONGODB_URI": secrets["uri"]}) as app:
        alpha, beta = webui(app, secrets["alpha"]), webui(app, secrets["beta"])
        assert alpha.util_set_model("tiny-sdxl") is None
        assert alpha.util_get_current_model() == SDXL_REPO
        assert beta.util_get_current_model() == SD_REPO
        assert beta.txt2img(**A1111).info["sd_model_name"] == SD_REPO
        assert alpha.txt2img(**A1111).info["sd_model_name"] == SDXL_REPO
        assert beta.util_set_model(SDXL_REPO) is None
        assert alpha.util_set_model("tiny-sd") is None
        assert alpha.txt2img(**A1111).info["sd_model_name"] == SD_REPO
        assert beta.txt2img(**A1111).info["sd_model_name"] == SDXL_REPO


def test_in_distributed_mode_the_choice_is_kept_in_redis_for_every_replica(
    env, secrets, shared_stack
):
    """Each key's choice, made on one replica, is what another answers; the web replica loads
    nothing, so the switch answers null at once, and the workers run the chosen model. A
    choice that MODELS no longer offers falls back to MODEL_ID."""
    replica_env = {
        **shared_stack.env, "MODEL_DIR": env["MODEL_DIR"], "MODELS": env["MODELS"],
        "API_KEYS": "1", "MONGODB_URI": secrets["uri"],
    }  # fmt: skip
    with replica_here(**replica_env) as first:
        alpha, beta = webui(first, secrets["alpha"]), webui(first, secrets["beta"])
        assert alpha.util_set_model("tiny-sdxl") is None
        assert beta.util_set_model("tiny-sd") is None
        unknown = post_options(alpha, {"sd_model_checkpoint": "nope"})
        assert unknown.status_code == 400
        assert unknown.json()["error"]["details"][0]["field"] == "sd_model_checkpoint"
        not_pulled = post_options(alpha, {"sd_model_checkpoint": SD_INPAINT_REPO})
        assert not_pulled.status_code == 409, not_pulled.text
    with replica_here(**replica_env) as second:
        alpha, beta = webui(second, secrets["alpha"]), webui(second, secrets["beta"])
        assert alpha.util_get_current_model() == SDXL_REPO
        assert beta.util_get_current_model() == SD_REPO
        beta.util_wait_for_ready(POLL)
        made = beta.txt2img(**A1111)
        assert made.info["sd_model_name"] == SD_REPO
        assert made.info["infotexts"][0].endswith(f"Model: {SD_REPO}, Model hash: "
                                                  f"{made.info['sd_model_hash']}")  # fmt: skip
    # A kept choice that MODELS no longer offers: MODEL_ID again.
    with replica_here(**{**replica_env, "MODELS": ""}) as narrower:
        assert webui(narrower, secrets["alpha"]).util_get_current_model() == SD_REPO
