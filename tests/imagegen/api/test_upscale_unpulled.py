"""An upscale loads no model, but it is a job of the service's model: refused (409), nothing
queued, while that model is not on the share. In process (served here), nothing pulled."""

import io
from pathlib import Path

import requests
from PIL import Image

from tests.support.in_process import served_here
from tests.support.local_hub import LocalHub
from tests.support.model_service import model_service_env


def test_an_upscale_is_refused_while_the_services_model_is_not_on_the_share(
    hub_root: Path, tmp_path: Path
):
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buffer, format="PNG")
    with (
        LocalHub(hub_root) as hub,
        served_here(**model_service_env(hub.url, tmp_path / "share", tmp_path)) as app,
    ):
        response = requests.post(
            app.url("/upscale"), data={"scale": "2", "upscaler": "Lanczos"},
            files={"image": ("in.png", buffer.getvalue(), "image/png")}, timeout=60,
        )  # fmt: skip
        assert response.status_code == 409, response.text
        assert "pull" in response.text.lower()
        assert requests.get(app.url("/jobs")).json() == []
        inputs = tmp_path / "images" / "inputs"
        assert not inputs.is_dir() or not list(inputs.iterdir())  # its source not kept
