"""Before any pull: the protocol routes read the model's names without loading, swapping or
downloading anything, and a generation is refused as /generate refuses it (409), with no
retry from the openai SDK. In process: the real webuiapi and openai clients against this
process's app, on a loader whose model was never pulled."""

from collections.abc import Iterator

import openai
import pytest
import webuiapi
from django.test import Client

from imagegen.model.loader import ModelLoader
from tests.support.in_process import loopback, openai_client
from tests.support.loaders import new_loader, serve
from tests.support.model_service import SD_REPO


@pytest.fixture
def loader(hub, tmp_path, monkeypatch, settings) -> Iterator[ModelLoader]:
    """A process's loader before any pull (an empty share, a fresh download cache)."""
    settings.MODEL_ID = SD_REPO
    share = tmp_path / "share"
    share.mkdir()
    found = new_loader(hub, share, tmp_path / "cache")
    serve(found, tmp_path / "images", monkeypatch)
    yield found
    assert found.status().state == "not_started"  # nothing started a pull, a load or a swap


def test_reads_and_options_start_no_model_work(loader):
    with loopback() as base_url:
        api = webuiapi.WebUIApi(baseurl=base_url + "/sdapi/v1")
        options = api.get_options()
        assert options["sd_model_checkpoint"] == "testorg/tiny-sd"
        assert [m["title"] for m in api.get_sd_models()] == ["testorg/tiny-sd"]
        assert api.set_options(options) is None
        assert api.get_progress()["state"]["job_count"] == 0
    assert Client().get("/v1/models").status_code == 200
    status = Client().get("/model/status").json()
    assert status["state"] == "not_started" and not status["weights_on_share"]


def test_a_generation_without_weights_is_409_and_not_retried(loader):
    attempts: list[str] = []
    hook = {"request": [lambda request: attempts.append(request.url.path)]}
    client = openai_client(api_key="k", max_retries=2, event_hooks=hook)
    with pytest.raises(openai.ConflictError) as refused:
        client.images.generate(prompt="nothing to load", size="64x64")
    assert "POST /model/pull first" in refused.value.message
    assert attempts == ["/v1/images/generations"]  # x-should-retry: false
    a1111 = Client().post("/sdapi/v1/txt2img", {"prompt": "nothing"}, "application/json")
    assert a1111.status_code == 409
    assert "POST /model/pull first" in a1111.json()["error"]["message"]
