"""POST /upscale with API keys, in process (this process's app on a loopback port, its jobs
given the filters): an upscale is the key's own, and its source must be the key's too."""

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from apikeys import services as key_services
from imagegen.generation.jobs import JobQueue
from imagegen.generation.upscale import Upscaling
from scripts.embedded_mongo import EmbeddedMongo
from tests.support.in_process import LoopbackApp
from tests.support.in_process_app import in_process_app
from tests.support.key_database import connected_database


@pytest.fixture(scope="module")
def keyed(
    mongo: EmbeddedMongo, hub_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LoopbackApp, dict[str, str]]]:
    with connected_database(mongo, "upscale-keys"):
        secrets = {
            "alice": key_services.key_create(name="alice").secret,
            "bob": key_services.key_create(name="bob").secret,
        }
        work = tmp_path_factory.mktemp("upscale-keys")
        with in_process_app(hub_root, work, API_KEYS=True) as served:
            assert served.backend is not None
            jobs = served.backend.jobs
            assert isinstance(jobs, JobQueue)
            jobs.upscaling = Upscaling(served.backend.upscalers, 0)  # the filters
            yield served, secrets


def test_an_upscale_is_the_keys_own_and_so_must_its_source_be(keyed):
    app, secrets = keyed
    alice = {"Authorization": f"Bearer {secrets['alice']}"}
    bob = {"Authorization": f"Bearer {secrets['bob']}"}
    made = requests.post(
        app.url("/generate"), data={"prompt": "a key's", "size": "64x64"}, headers=alice
    )
    assert made.status_code == 200, made.text
    source_id = made.headers["X-Image-Id"]
    fields = {"image_id": source_id, "scale": "2", "upscaler": "Lanczos"}
    refused = requests.post(app.url("/upscale"), data=fields, headers=bob, timeout=60)
    assert refused.status_code == 404, refused.text  # another key's image is unknown to bob
    done = requests.post(app.url("/upscale"), data=fields, headers=alice, timeout=60)
    assert done.status_code == 200, done.text
    image_id = done.headers["X-Image-Id"]
    record = requests.get(app.url(f"/images/{image_id}"), headers=alice).json()
    assert record["key"] == "alice"
    source_url = record["parameters"]["upscale"]["source_url"]
    assert requests.get(app.url(source_url), headers=alice).status_code == 200
    assert requests.get(app.url(source_url), headers=bob).status_code == 404
    assert requests.get(app.url(f"/images/{image_id}"), headers=bob).status_code == 404
    job = requests.get(app.url(f"/jobs/{done.headers['X-Job-Id']}"), headers=bob)
    assert job.status_code == 404
