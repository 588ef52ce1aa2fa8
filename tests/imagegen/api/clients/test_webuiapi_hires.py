"""Hires fix through the clients, in both job modes (the package's open app: in process, and a
web replica on the session's shared Redis and worker): webuiapi's txt2img with enable_hr
unchanged, and the native JSON `hires` object, each a 64x64 first pass made 128x128 in one job
whose steps count both passes. The rules and phases: tests/imagegen/generation/test_hires.py."""

import io

import pytest
import requests
import webuiapi
from PIL import Image

from tests.imagegen.api.clients.conftest import wait_until
from tests.support.processes import AppServer


@pytest.mark.both_modes
def test_webuiapi_txt2img_with_enable_hr_makes_the_larger_image(open_app: AppServer):
    api = webuiapi.WebUIApi(baseurl=open_app.url("/sdapi/v1"))
    modes = api.get_latent_upscale_modes()
    assert modes[0] == {"name": "Latent"} and len(modes) == 6
    result = api.txt2img(
        prompt="webui hires harbour", seed=5, steps=2, width=64, height=64, enable_hr=True,
        hr_scale=2, hr_upscaler=webuiapi.HiResUpscaler.Latent,
    )  # fmt: skip
    assert result.image.size == (128, 128)
    infotext = result.info["infotexts"][0]
    assert "Size: 64x64" in infotext
    assert infotext.endswith(
        "Denoising strength: 0.7, Hires upscale: 2, Hires steps: 2, Hires upscaler: Latent"
    )


@pytest.mark.both_modes
def test_the_native_hires_object_runs_an_upscaler_as_one_job(open_app: AppServer):
    body = {
        "prompt": "native hires lighthouse", "size": "64x64", "steps": 2, "seed": 9,
        "async": True, "hires": {"upscaler": "Lanczos", "steps": 3, "strength": 0.5},
    }  # fmt: skip
    started = requests.post(open_app.url("/generate"), json=body, timeout=60)
    assert started.status_code == 202, started.text
    url = open_app.url(f"/jobs/{started.json()['id']}")
    job = wait_until(
        lambda: (
            (j := requests.get(url, timeout=30).json())["state"] not in ("queued", "running") and j
        ),
        timeout=300,
    )
    assert job["state"] == "succeeded", job
    assert job["progress"]["steps"] == 2 + 3
    hires = job["image"]["parameters"]["hires"]
    assert (hires["upscaler"], hires["size"], hires["steps"]) == ("Lanczos", [128, 128], 3)
    png = requests.get(open_app.url(job["image_url"]), timeout=30)
    assert Image.open(io.BytesIO(png.content)).size == (128, 128)
