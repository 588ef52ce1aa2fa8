"""The upscalers through the routes and webuiapi, in process (served_here; webuiapi over a
loopback port), with UPSCALERS a tiny random x4 ESRGAN (a Real-ESRGAN .pth) and a tiny x2
one (a bare .safetensors) on the test hub."""

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import webuiapi

from tests.support.in_process import LoopbackApp, served_here
from tests.support.local_hub import LocalHub
from tests.support.model_service import model_service_env, wait_for_state
from tests.support.tiny_upscaler import ESRGAN_REPO, place_on_hub

UPSCALERS = f"{ESRGAN_REPO}:tiny-x4.pth, {ESRGAN_REPO}:tiny-x2.safetensors=Double"


@pytest.fixture(scope="module")
def app(hub_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackApp]:
    place_on_hub(hub_root)
    work = tmp_path_factory.mktemp("upscalers")
    with LocalHub(hub_root) as hub:
        env = model_service_env(hub.url, work / "share", work)
        with served_here(**env, UPSCALERS=UPSCALERS) as served:
            yield served


def test_get_upscalers_lists_the_filters_then_each_file_its_scale_once_pulled(app):
    api = webuiapi.WebUIApi(baseurl=app.url("/sdapi/v1"))
    before = api.get_upscalers()
    assert [(u["name"], u["scale"]) for u in before] == [
        ("Lanczos", None), ("Nearest", None), ("tiny-x4", None), ("Double", None),
    ]  # fmt: skip
    x4 = before[2]
    assert x4["model_name"] == "ESRGAN"
    assert x4["model_path"] == "upscalers/testorg--tiny-esrgan/tiny-x4.pth"  # share-relative
    assert x4["model_url"].endswith(f"/{ESRGAN_REPO}/resolve/main/tiny-x4.pth")
    assert x4["model_url"].startswith(app.env["HF_ENDPOINT"])

    # POST /model/pull with no body pulls the upscalers beside MODEL_ID.
    pulled = requests.post(app.url("/model/pull"), timeout=30)
    assert pulled.status_code == 202, pulled.text
    deadline = time.monotonic() + 60
    while app.backend.upscalers.missing():
        assert time.monotonic() < deadline, "the upscalers were not pulled"
        time.sleep(0.05)
    app.backend.upscalers.wait(30)
    assert wait_for_state(app, {"ready", "failed"}, 60)["state"] == "ready"  # MODEL_ID's too
    listed = {u["name"]: u["scale"] for u in api.get_upscalers()}
    assert listed == {"Lanczos": None, "Nearest": None, "tiny-x4": 4, "Double": 2}
