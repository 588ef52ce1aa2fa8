"""POST /generate's `model`: a request runs the offered model it names, which the answer, the
record and the PNG's infotext say; the same bytes as that model served alone, and across a
swap; a model not on the share is a 409 naming it and how to pull it, an unknown one a 400,
nothing queued either way. In process (served_here), MODEL_ID the tiny SD model and MODELS
the tiny SDXL one, on one share for the module."""

import io
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from PIL import Image

from tests.support.distributed import replica_here
from tests.support.in_process import LoopbackApp, served_here
from tests.support.local_hub import LocalHub
from tests.support.model_service import SD_REPO, SDXL_REPO, model_service_env, pull_until_ready

# Every field the two models' defaults could differ on, sent: SDXL as a MODELS entry has no
# GEN_DEFAULT_STEPS, as MODEL_ID it has the test service's 2.
FIELDS = {"prompt": "a red cube", "seed": "7", "steps": "2", "guidance": "5", "size": "64x64"}


@pytest.fixture(scope="module")
def hub_url(hub_root: Path) -> Iterator[str]:
    with LocalHub(hub_root) as hub:
        yield hub.url


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("generate-models")


def service(hub_url: str, work: Path, **env: str):
    return served_here(**{**model_service_env(hub_url, work / "share", work), **env})


@pytest.fixture(scope="module")
def app(hub_url: str, work: Path) -> Iterator[LoopbackApp]:
    with service(hub_url, work, MODELS=SDXL_REPO) as served:
        pull_until_ready(served)
        yield served


def generate(app: LoopbackApp, **fields: str) -> requests.Response:
    return requests.post(app.url("/generate"), data={**FIELDS, **fields}, timeout=120)


def test_an_offered_model_not_on_the_share_is_a_409_naming_it_and_nothing_is_queued(app):
    refused = generate(app, model="tiny-sdxl")
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["message"] == (
        f"The model {SDXL_REPO} is offered but not on the share yet: POST "
        f"/model/pull?model={SDXL_REPO} (or manage.py pull_model --model {SDXL_REPO}) first"
    )
    unknown = generate(app, model="dall-e-3")
    assert unknown.status_code == 400
    assert unknown.json()["error"]["message"].startswith(
        "Invalid request: model: 'dall-e-3' is not offered; offered: "
    )
    assert requests.get(app.url("/jobs"), timeout=30).json() == []


def test_a_request_runs_the_model_it_names_and_says_so(app):
    """After its pull: the header, the record and the PNG's infotext name the model, for an
    edit too; a request naming MODEL_ID, or none, runs MODEL_ID."""
    pulled = requests.post(app.url("/model/pull"), data={"model": SDXL_REPO}, timeout=30)
    assert pulled.status_code == 202
    until(lambda: status(app)["models"][1]["state"] == "ready")
    made = generate(app, model=SDXL_REPO.upper(), **{"async": "true"})
    assert made.status_code == 202, made.text
    job_url = app.url(f"/jobs/{made.json()['id']}")
    until(lambda: requests.get(job_url, timeout=30).json()["state"] in FINISHED)
    record = requests.get(job_url, timeout=30).json()
    assert record["state"] == "succeeded", record
    assert record["parameters"]["model"] == SDXL_REPO  # as it runs: the repo id
    assert record["image"]["parameters"]["model_id"] == SDXL_REPO
    image = requests.get(app.url(record["image_url"]), timeout=30)
    assert f"Model: {SDXL_REPO}, Model hash: " in image_infotext(image.content)

    edit = requests.post(
        app.url("/generate"), data={**FIELDS, "model": "tiny-sdxl", "strength": "0.5"},
        files={"image": ("in.png", image.content, "image/png")}, timeout=120,
    )  # fmt: skip
    assert edit.status_code == 200, edit.text
    assert edit.headers["X-Model"] == SDXL_REPO and edit.headers["X-Strength"] == "0.5"

    default = generate(app)
    assert default.status_code == 200 and default.headers["X-Model"] == SD_REPO
    by_name = generate(app, model="tiny-sd")
    assert by_name.status_code == 200 and by_name.headers["X-Model"] == SD_REPO
    assert by_name.content == default.content


def test_a_model_chosen_makes_the_same_bytes_as_served_alone_and_across_swaps(app, hub_url, work):
    """Room for one model: SD, SDXL, SD again each swap; each model's image is the same
    bytes every time, and SDXL's the same as a service whose MODEL_ID it is makes."""
    pulled = requests.post(app.url("/model/pull"), data={"model": SDXL_REPO}, timeout=30)
    assert pulled.status_code in (200, 202)  # on the share whatever ran before this test
    until(lambda: status(app)["models"][1]["state"] == "ready")
    app.backend.shelf.limit = 1
    for loader in app.backend.shelf.loaders.values():  # nothing resident, as after a start
        loader.free()
    assert app.backend.shelf.resident() == []
    first_sd = generate(app, model=SD_REPO)
    chosen = generate(app, model="tiny-sdxl")
    again_sd = generate(app)
    assert chosen.status_code == 200 and chosen.headers["X-Model"] == SDXL_REPO
    assert app.backend.shelf.resident() == [SD_REPO]
    assert again_sd.content == first_sd.content
    chosen_again = generate(app, model=SDXL_REPO)
    assert chosen_again.content == chosen.content
    with service(hub_url, work, MODEL_ID=SDXL_REPO) as alone:
        pull_until_ready(alone)
        solo = generate(alone)
    assert solo.status_code == 200 and solo.headers["X-Model"] == SDXL_REPO
    assert solo.content == chosen.content


def test_in_distributed_mode_a_models_entry_not_on_the_share_is_the_same_409(
    hub_url, work, redis_server
):
    """The web replica of distributed mode (no worker needed) checks the entry's own copy on
    the share, as in process: the 409 names it and its pull; nothing is queued."""
    env = model_service_env(hub_url, work / "distributed-share", work)
    with replica_here(**env, JOB_BROKER_URL=redis_server.url, MODELS=SDXL_REPO) as replica:
        refused = generate(replica, model="tiny-sdxl")
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["message"].startswith(
            f"The model {SDXL_REPO} is offered but not on the share yet: POST "
            f"/model/pull?model={SDXL_REPO}"
        )
        assert generate(replica, model="nope").status_code == 400
        assert requests.get(replica.url("/jobs"), timeout=30).json() == []


FINISHED = ("succeeded", "failed", "cancelled")


def status(app: LoopbackApp) -> dict:
    return requests.get(app.url("/model/status"), timeout=30).json()


def until(condition: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.05)


def image_infotext(png: bytes) -> str:
    return Image.open(io.BytesIO(png)).text["parameters"]


def test_an_offered_model_that_failed_to_load_is_named_with_its_own_pull(hub_url, work):
    """A MODELS entry whose pull failed: the 503 names it and the pull by name (a bare pull
    would retry MODEL_ID)."""
    missing = "testorg/not-on-the-hub"
    with service(hub_url, work / "failed", MODELS=missing) as served:
        pulled = requests.post(served.url("/model/pull"), data={"model": missing}, timeout=30)
        assert pulled.status_code == 202, pulled.text
        until(lambda: status(served)["models"][1]["state"] == "failed")
        refused = generate(served, model=missing)
        assert refused.status_code == 503, refused.text
        message = refused.json()["error"]["message"]
        assert message.startswith(f"The model {missing} failed to load: "), message
        assert message.endswith(f"POST /model/pull?model={missing} to retry"), message
