"""Two keys and an admin through the openai SDK and webuiapi, in both job modes: each key
lists only its own images and jobs, another key's id answers 404 (to read, to cancel, its
PNG), the admin sees both, and a signed image link works whoever fetches it."""

import uuid
from collections.abc import Iterator
from pathlib import Path

import mongoengine
import openai
import pytest
import requests
import webuiapi

from apikeys import services
from scripts.embedded_mongo import EmbeddedMongo
from tests.support.local_hub import LocalHub
from tests.support.model_service import MODES, PULL_TIMEOUT, model_service_env, wait_for_state
from tests.support.processes import AppServer
from todos.connection import connect_database


@pytest.fixture(scope="module")
def secrets(mongo: EmbeddedMongo) -> Iterator[dict[str, str]]:
    """alice, bob and root (an admin), in the module's database; its URI under "uri"."""
    from django.conf import settings

    uri = mongo.uri(f"keys_{uuid.uuid4().hex[:12]}")
    before = settings.MONGODB_URI
    settings.MONGODB_URI = uri
    mongoengine.disconnect()
    connect_database()
    made = {
        "alice": services.key_create(name="alice").secret,
        "bob": services.key_create(name="bob").secret,
        "root": services.key_create(name="root", admin=True).secret,
    }
    yield {**made, "uri": uri}
    mongoengine.disconnect()
    settings.MONGODB_URI = before


@pytest.fixture(scope="module", params=MODES)
def app(
    request: pytest.FixtureRequest,
    secrets: dict[str, str],
    hub_root: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[AppServer]:
    env = {"API_KEYS": "1", "MONGODB_URI": secrets["uri"]}
    work = tmp_path_factory.mktemp(f"keys-{request.param}")
    if request.param == "distributed":  # the session's stack, its model pulled already
        with request.getfixturevalue("shared_stack").replica(work / "web.log", **env) as app:
            yield app
        return
    with LocalHub(hub_root) as hub:
        base = model_service_env(hub.url, work / "share", work)
        with AppServer({**base, **env}, work / "app.log") as app:
            pulled = requests.post(app.url("/model/pull"), headers=as_(secrets["root"]))
            assert pulled.status_code == 202, pulled.text
            assert (
                wait_for_state(app, {"ready", "failed"}, PULL_TIMEOUT["in-process"])["state"]
                == "ready"
            )
            yield app


def as_(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def get(app: AppServer, path: str, secret: str, **params) -> requests.Response:
    return requests.get(app.url(path), headers=as_(secret), params=params, timeout=30)


def test_each_key_sees_and_touches_only_its_own(app: AppServer, secrets: dict[str, str]) -> None:
    run = uuid.uuid4().hex[:6]
    sdk = openai.OpenAI(base_url=app.url("/v1"), api_key=secrets["alice"], max_retries=0)
    made = sdk.images.generate(prompt=f"alice {run}", size="64x64", response_format="url")
    webui = webuiapi.WebUIApi(baseurl=app.url("/sdapi/v1"), username="b", password=secrets["bob"])
    webui.txt2img(prompt=f"bob {run}", width=64, height=64, steps=2)

    def images(who: str) -> set[str]:
        items = get(app, "/images", secrets[who], limit=100).json()["items"]
        return {i["parameters"]["prompt"] for i in items if i["parameters"]["prompt"].endswith(run)}

    def jobs(who: str) -> dict[str, str]:
        found = get(app, "/jobs", secrets[who], limit=200).json()
        return {
            j["parameters"]["prompt"]: j for j in found if j["parameters"]["prompt"].endswith(run)
        }

    assert images("alice") == {f"alice {run}"}
    assert images("bob") == {f"bob {run}"}
    assert images("root") == {f"alice {run}", f"bob {run}"}
    assert set(jobs("alice")) == {f"alice {run}"} and set(jobs("bob")) == {f"bob {run}"}
    assert set(jobs("root")) == {f"alice {run}", f"bob {run}"}

    bobs_job = jobs("bob")[f"bob {run}"]
    bobs_image = bobs_job["image"]["id"]
    for path in (
        f"/jobs/{bobs_job['id']}",
        f"/jobs/{bobs_job['id']}/events",
        f"/images/{bobs_image}",
        f"/images/{bobs_image}.png",
    ):
        assert get(app, path, secrets["alice"]).status_code == 404, path
        assert get(app, path, secrets["root"]).status_code == 200, path
    for cancel in (
        requests.delete(app.url(f"/jobs/{bobs_job['id']}"), headers=as_(secrets["alice"])),
        requests.post(app.url(f"/jobs/{bobs_job['id']}/cancel"), headers=as_(secrets["alice"])),
        requests.delete(app.url(f"/images/{bobs_image}"), headers=as_(secrets["alice"])),
    ):
        assert cancel.status_code == 404, cancel.text
    # Bob's own, finished: 409 (there is nothing left to cancel), not 404.
    own = requests.delete(app.url(f"/jobs/{bobs_job['id']}"), headers=as_(secrets["bob"]))
    assert own.status_code == 409
    assert get(app, f"/images/{bobs_image}.png", secrets["bob"]).status_code == 200

    # A signed link works for the image it names, with no key at all.
    link = made.data[0].url
    assert link and requests.get(link, timeout=30).status_code == 200
