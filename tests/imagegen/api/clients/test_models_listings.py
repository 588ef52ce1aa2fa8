"""Every offered model through the real clients: the openai SDK's models.list() and
models.retrieve() (its slash sent as %2F), webuiapi's get_sd_models(), util_get_model_names()
and refresh_checkpoints(). In process (served_here; the SDK over WSGI, webuiapi over a
loopback port), with MODEL_ID the tiny SD model and MODELS the tiny SDXL one."""

import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import requests
import webuiapi

from tests.support.in_process import LoopbackApp, openai_client, served_here
from tests.support.local_hub import LocalHub
from tests.support.model_service import SD_REPO, SDXL_REPO, model_service_env


@pytest.fixture(scope="module")
def app(hub_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackApp]:
    work = tmp_path_factory.mktemp("listings")
    with LocalHub(hub_root) as hub:
        env = model_service_env(hub.url, work / "share", work)
        with served_here(**env, MODELS=SDXL_REPO) as served:
            yield served


def test_openai_lists_and_retrieves_every_offered_model_by_repo_id(app):
    client = openai_client(api_key="unused")
    assert [m.id for m in client.models.list()] == [SD_REPO, SDXL_REPO]
    sdxl = client.models.retrieve(SDXL_REPO)
    assert (sdxl.id, sdxl.object, sdxl.owned_by) == (SDXL_REPO, "model", "imagegen")
    assert client.models.retrieve("tiny-sdxl").id == SDXL_REPO  # its unique name part
    # The slash as it is, as a client that does not encode it sends it.
    plain = requests.get(app.url(f"/v1/models/{SD_REPO}"), timeout=30)
    assert plain.status_code == 200 and plain.json()["id"] == SD_REPO
    with pytest.raises(openai.NotFoundError) as unknown:
        client.models.retrieve("dall-e-3")
    assert f"offered: {SD_REPO}, {SDXL_REPO}" in unknown.value.message


def test_webuiapi_lists_every_offered_model_with_a1111s_fields(app):
    api = webuiapi.WebUIApi(baseurl=app.url("/sdapi/v1"))
    listed = api.get_sd_models()
    assert [(m["title"], m["model_name"]) for m in listed] == [
        (SD_REPO, "tiny-sd"), (SDXL_REPO, "tiny-sdxl"),
    ]  # fmt: skip
    assert [m["filename"] for m in listed] == ["testorg--tiny-sd", "testorg--tiny-sdxl"]
    assert all(m["hash"] is None and m["sha256"] is None for m in listed)  # none on the share
    assert api.util_get_model_names() == [SD_REPO, SDXL_REPO]
    api.refresh_checkpoints()  # raises unless 200

    pulled = requests.post(app.url("/model/pull"), params={"model": SDXL_REPO}, timeout=30)
    assert pulled.status_code == 202
    deadline = time.monotonic() + 60
    while not (sdxl := status(app)["models"][1])["weights_on_share"]:
        assert time.monotonic() < deadline, sdxl
        time.sleep(0.05)
    commit = app.backend.shelf.loader(SDXL_REPO).status().commit
    assert commit and api.get_sd_models()[1]["hash"] == commit[:10]
    assert api.get_sd_models()[0]["hash"] is None  # MODEL_ID's is still not on the share


def status(app: LoopbackApp) -> dict:
    return requests.get(app.url("/model/status"), timeout=30).json()
