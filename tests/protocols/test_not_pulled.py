"""Before any pull: the protocol routes read the model's names without loading, swapping or
downloading anything, and a generation is refused as /generate refuses it (409), with no
retry from the openai SDK."""

import openai
import pytest
import requests
import webuiapi

from tests.support.model_service import wait_for_state


def test_reads_and_options_start_no_model_work(start_app):
    app = start_app()
    api = webuiapi.WebUIApi(baseurl=app.url("/sdapi/v1"))
    options = api.get_options()
    assert options["sd_model_checkpoint"] == "testorg/tiny-sd"
    assert [m["title"] for m in api.get_sd_models()] == ["testorg/tiny-sd"]
    assert api.set_options(options) is None
    assert api.get_progress()["state"]["job_count"] == 0
    assert requests.get(app.url("/v1/models")).status_code == 200
    status = requests.get(app.url("/model/status")).json()
    assert status["state"] == "not_started" and not status["weights_on_share"]


def test_a_generation_without_weights_is_409_and_not_retried(start_app):
    app = start_app()
    attempts: list[str] = []
    hook = {"request": [lambda request: attempts.append(request.url.path)]}
    client = openai.OpenAI(
        base_url=app.url("/v1"), api_key="k", max_retries=2,
        http_client=openai.DefaultHttpxClient(event_hooks=hook),
    )  # fmt: skip
    with pytest.raises(openai.ConflictError) as refused:
        client.images.generate(prompt="nothing to load", size="64x64")
    assert "POST /model/pull first" in refused.value.message
    assert attempts == ["/v1/images/generations"]  # x-should-retry: false
    a1111 = requests.post(app.url("/sdapi/v1/txt2img"), json={"prompt": "nothing"})
    assert a1111.status_code == 409
    assert "POST /model/pull first" in a1111.json()["error"]["message"]
    assert wait_for_state(app, {"not_started"})["state"] == "not_started"
