"""Two keys and an admin through the openai SDK and webuiapi, in both job modes: each key
lists only its own images and jobs, another key's id answers 404 (to read, to cancel, its
PNG), the admin sees both, and a signed image link works whoever fetches it. A key's limits
give the SDK a RateLimitError while other keys get through, on every replica (distributed
mode runs two web replicas here; in process, this process's app on a loopback port)."""

import hashlib
import io
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import openai
import pytest
import requests
import webuiapi
from PIL import Image

from apikeys import services
from scripts.embedded_mongo import EmbeddedMongo
from tests.support.in_process_app import in_process_app
from tests.support.key_database import connected_database, in_one_minute
from tests.support.mcp_client import call_tool
from tests.support.model_service import MODES
from tests.support.processes import AppServer
from tests.support.xdist_schedule import stack_of


@pytest.fixture(scope="module")
def secrets(mongo: EmbeddedMongo) -> Iterator[dict[str, str]]:
    """alice, bob and root (an admin), in the module's database; its URI under "uri"."""
    with connected_database(mongo, "keys") as uri:
        made = {
            "alice": services.key_create(name="alice").secret,
            "bob": services.key_create(name="bob").secret,
            "root": services.key_create(name="root", admin=True).secret,
            "carol": services.key_create(name="carol", max_queued=1).secret,
            "erin": services.key_create(name="erin", max_queued=1).secret,
        }
        yield {**made, "uri": uri}


@pytest.fixture(scope="module", params=MODES)
def apps(
    request: pytest.FixtureRequest,
    secrets: dict[str, str],
    hub_root: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[list[AppServer]]:
    """The module's app in process (this process's, on a loopback port); in distributed mode
    two web replicas of one stack."""
    env = {
        "API_KEYS": "1",
        "MONGODB_URI": secrets["uri"],
        "GEN_MAX_STEPS": "500",
        # Synchronous requests wait behind long jobs on purpose (below): none refused by its
        # estimate.
        "GEN_SYNC_REFUSE_FACTOR": "0",
    }
    work = tmp_path_factory.mktemp(f"keys-{request.param}")
    if request.param == "distributed":  # the session's stack, its model pulled already
        stack = stack_of(request)
        with (
            stack.replica(work / "web-1.log", **env) as one,
            stack.replica(work / "web-2.log", **env) as two,
        ):
            yield [one, two]
        return
    # This process's MongoEngine is on the module's database already (secrets).
    with in_process_app(hub_root, work, API_KEYS=True, GEN_MAX_STEPS=500,
                        GEN_SYNC_REFUSE_FACTOR=0) as served:  # fmt: skip
        yield [served]


@pytest.fixture
def app(apps: list[AppServer]) -> AppServer:
    return apps[0]


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

    # Whose each is (`owner`, the key's name) is told to the admin only: a key that sees its
    # own only is answered no owner, of its own or anyone else's.
    assert {p: j["owner"] for p, j in jobs("root").items()} == {
        f"alice {run}": "alice", f"bob {run}": "bob"
    }  # fmt: skip
    admin_images = get(app, "/images", secrets["root"], limit=100).json()["items"]
    assert {i["owner"] for i in admin_images if i["parameters"]["prompt"].endswith(run)} == {
        "alice", "bob"
    }  # fmt: skip
    alices_job = jobs("alice")[f"alice {run}"]
    own = f"/jobs/{alices_job['id']}"
    for path in ("/jobs", "/images", own, f"{own}/events", f"/images/{alices_job['image']['id']}"):
        answer = get(app, path, secrets["alice"])
        assert answer.status_code == 200 and '"owner"' not in answer.text, path
    events = get(app, f"{own}/events", secrets["root"])
    assert '"owner":"alice"' in events.text.replace(" ", "")

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
    # Its preview: another key's job is unknown to alice, not "no preview yet".
    preview = get(app, f"/jobs/{bobs_job['id']}/preview", secrets["alice"])
    assert preview.status_code == 404 and "preview" not in preview.text.lower()
    for cancel in (
        requests.delete(app.url(f"/jobs/{bobs_job['id']}"), headers=as_(secrets["alice"])),
        requests.post(app.url(f"/jobs/{bobs_job['id']}/cancel"), headers=as_(secrets["alice"])),
        requests.delete(app.url(f"/images/{bobs_image}"), headers=as_(secrets["alice"])),
    ):
        assert cancel.status_code == 404, cancel.text
    # The admin sees whose it is.
    assert get(app, f"/images/{bobs_image}", secrets["root"]).json()["key"] == "bob"
    # Bob's own, finished: 409 (there is nothing left to cancel), not 404.
    own = requests.delete(app.url(f"/jobs/{bobs_job['id']}"), headers=as_(secrets["bob"]))
    assert own.status_code == 409
    assert get(app, f"/images/{bobs_image}.png", secrets["bob"]).status_code == 200
    removed = requests.delete(app.url(f"/images/{bobs_image}"), headers=as_(secrets["root"]))
    assert removed.json()["owner"] == "bob"

    # A signed link works for the image it names, with no key at all.
    link = made.data[0].url
    assert link and requests.get(link, timeout=30).status_code == 200


def wait_for(app: AppServer, job_id: str, secret: str, states: set[str]) -> dict:
    deadline = time.monotonic() + 120
    while (job := get(app, f"/jobs/{job_id}", secret).json())["state"] not in states:
        assert time.monotonic() < deadline, job
        time.sleep(0.05)
    return job


def test_max_queued_gives_the_sdk_a_rate_limit_error_while_other_keys_get_through(
    apps: list[AppServer], secrets: dict[str, str]
) -> None:
    first, other = apps[0], apps[-1]
    long_job = {"prompt": "carol's long one", "steps": "400", "size": "256x256", "async": "1"}
    started = requests.post(first.url("/generate"), data=long_job, headers=as_(secrets["carol"]))
    assert started.status_code == 202, started.text
    blocker = started.json()["id"]
    try:
        wait_for(first, blocker, secrets["carol"], {"running"})
        sdk = openai.OpenAI(base_url=other.url("/v1"), api_key=secrets["carol"], max_retries=0)
        with pytest.raises(openai.RateLimitError) as refused:
            sdk.images.generate(prompt="carol again", size="64x64")
        assert refused.value.response.headers["Retry-After"] == "5"
        assert "1 generations queued or running" in str(refused.value)
        with pytest.raises(openai.RateLimitError):  # a streamed one is limited alike
            for _ in sdk.images.generate(prompt="carol streams", size="64x64", stream=True):
                pass
        # Another key still gets through (its job waits its turn: the one worker is busy).
        alice = requests.post(
            other.url("/generate"),
            data={"prompt": "alice meanwhile", "size": "64x64", "async": "1"},
            headers=as_(secrets["alice"]),
        )
        assert alice.status_code == 202, alice.text
    finally:
        requests.delete(first.url(f"/jobs/{blocker}"), headers=as_(secrets["carol"]))
    done = wait_for(other, alice.json()["id"], secrets["alice"], {"succeeded", "failed"})
    assert done["state"] == "succeeded"
    wait_for(first, blocker, secrets["carol"], {"cancelled", "succeeded", "failed"})
    # Its job finished, carol may generate again.
    assert sdk.images.generate(prompt="carol after", size="64x64").data


# Requests of one key sent at once: as many as the app has threads for them.
AT_ONCE = 12


def test_max_queued_holds_for_requests_of_one_key_at_the_same_instant(
    apps: list[AppServer], secrets: dict[str, str]
) -> None:
    """--max-queued 1 and AT_ONCE requests of the key at once (spread over the replicas): exactly
    one is queued, the others get 429 with Retry-After. Each job's submit counts the key's
    jobs in the step that queues it; a check before it would let several pass together."""
    run, ready = uuid.uuid4().hex[:6], threading.Barrier(AT_ONCE)

    def send(index: int) -> requests.Response:
        app = apps[index % len(apps)]
        fields = {"prompt": f"erin {run} {index}", "steps": "400", "size": "256x256"}
        ready.wait()
        return requests.post(
            app.url("/generate"), data={**fields, "async": "1"}, headers=as_(secrets["erin"]),
            timeout=60,
        )  # fmt: skip

    with ThreadPoolExecutor(AT_ONCE) as pool:
        answers = list(pool.map(send, range(AT_ONCE)))
    admitted = [answer.json()["id"] for answer in answers if answer.status_code == 202]
    try:
        assert sorted(answer.status_code for answer in answers) == [202] + [429] * (AT_ONCE - 1), [
            answer.text for answer in answers
        ]
        assert all(a.headers["Retry-After"] == "5" for a in answers if a.status_code == 429)
        # The admin's cancel answers whose the job was.
        cancelled = requests.delete(
            apps[0].url(f"/jobs/{admitted[0]}"), headers=as_(secrets["root"])
        )
        assert cancelled.json()["owner"] == "erin"
    finally:
        for job_id in admitted:
            requests.delete(apps[0].url(f"/jobs/{job_id}"), headers=as_(secrets["erin"]))
    for job_id in admitted:
        wait_for(apps[0], job_id, secrets["erin"], {"cancelled", "succeeded", "failed"})


def test_per_minute_counts_images_across_replicas(
    apps: list[AppServer], secrets: dict[str, str]
) -> None:
    first, other = apps[0], apps[-1]

    def spend(n: int) -> tuple[int, openai.RateLimitError | None]:
        """A fresh key of --per-minute 2: its two images, then its third's refusal."""
        dave = services.key_create(name=f"dave-{uuid.uuid4().hex[:8]}", per_minute=2).secret
        sdk = openai.OpenAI(base_url=first.url("/v1"), api_key=dave, max_retries=0)
        made = len(sdk.images.generate(prompt="dave two", size="64x64", n=2).data)
        again = openai.OpenAI(base_url=other.url("/v1"), api_key=dave, max_retries=0)
        try:
            again.images.generate(prompt="dave three", size="64x64")
        except openai.RateLimitError as refused:
            return made, refused
        return made, None

    made, refused = in_one_minute(spend)  # the whole try inside one minute's window
    assert made == 2 and refused is not None
    assert 1 <= int(refused.response.headers["Retry-After"]) <= 60
    assert "2 images a minute" in str(refused)
    # Others are not counted with dave.
    alice = openai.OpenAI(base_url=other.url("/v1"), api_key=secrets["alice"], max_retries=0)
    assert alice.images.generate(prompt="alice not counted", size="64x64").data


def test_the_queue_takes_keys_in_turn_and_positions_say_so(
    apps: list[AppServer], secrets: dict[str, str]
) -> None:
    """alice's batch of 3 waits; bob's one job, sent after it, runs second, not fourth."""
    first, other = apps[0], apps[-1]
    run = uuid.uuid4().hex[:6]
    long_job = {"prompt": f"hold {run}", "steps": "400", "size": "256x256", "async": "1"}
    blocker = requests.post(first.url("/generate"), data=long_job, headers=as_(secrets["root"]))
    assert blocker.status_code == 202, blocker.text
    blocker_id = blocker.json()["id"]
    wait_for(first, blocker_id, secrets["root"], {"running"})
    sdk = openai.OpenAI(base_url=first.url("/v1"), api_key=secrets["alice"], max_retries=0)
    batch = threading.Thread(
        target=sdk.images.generate, kwargs={"prompt": f"alice {run}", "size": "64x64", "n": 3}
    )
    batch.start()
    try:
        deadline = time.monotonic() + 60
        while len(mine := by_prompt(first, secrets["alice"], f"alice {run}")) < 3:
            assert time.monotonic() < deadline, mine
            time.sleep(0.05)
        bob = requests.post(
            other.url("/generate"),
            data={"prompt": f"bob {run}", "size": "64x64", "async": "1"},
            headers=as_(secrets["bob"]),
        )
        assert bob.status_code == 202, bob.text
        assert bob.json()["position"] == 2
        alices = sorted(
            job["position"] for job in by_prompt(other, secrets["root"], f"alice {run}")
        )
        assert alices == [1, 3, 4]
    finally:
        requests.delete(first.url(f"/jobs/{blocker_id}"), headers=as_(secrets["root"]))
    batch.join(120)
    done = by_prompt(first, secrets["root"], run)
    assert all(job["state"] in ("succeeded", "cancelled") for job in done), done
    order = [job["parameters"]["prompt"] for job in sorted(done, key=lambda j: j["started_at"])]
    assert order == [f"hold {run}", f"alice {run}", f"bob {run}", f"alice {run}", f"alice {run}"]


def by_prompt(app: AppServer, secret: str, text: str) -> list[dict]:
    found = get(app, "/jobs", secret, limit=200).json()
    return [job for job in found if text in job["parameters"]["prompt"]]


def noise_png(seed: int) -> bytes:
    """A picture of this seed's own: its sha256 no other test's input has."""
    pixels = np.random.default_rng(seed).integers(0, 256, (64, 64, 3), np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(buffer, format="PNG")
    return buffer.getvalue()


def edit_source(app: AppServer, secret: str, picture: bytes) -> str:
    """The input URL of the source of an edit this key makes of `picture`."""
    sdk = openai.OpenAI(base_url=app.url("/v1"), api_key=secret, max_retries=0)
    sdk.images.edit(image=("in.png", picture, "image/png"), prompt="an edit", size="64x64")
    mine = get(app, "/images", secret, limit=100).json()["items"]
    digest = hashlib.sha256(picture).hexdigest()
    links = [i["parameters"]["edit"]["source"]["url"] for i in mine if "edit" in i["parameters"]]
    assert f"/images/inputs/{digest}" in links
    return f"/images/inputs/{digest}"


def test_an_edits_inputs_are_its_keys_own(app: AppServer, secrets: dict[str, str]) -> None:
    """GET /images/inputs/<sha256>: another key's source answers 404, as its images do."""
    seed = uuid.uuid4().int % 2**32
    alices = edit_source(app, secrets["alice"], noise_png(seed))
    bobs = edit_source(app, secrets["bob"], noise_png(seed + 1))
    assert get(app, alices, secrets["alice"]).status_code == 200
    assert get(app, bobs, secrets["bob"]).status_code == 200
    assert get(app, alices, secrets["bob"]).status_code == 404
    assert get(app, bobs, secrets["alice"]).status_code == 404
    for path in (alices, bobs):  # the admin sees every key's
        assert get(app, path, secrets["root"]).status_code == 200
    # A picture both keys sent to edit is both keys'.
    assert edit_source(app, secrets["bob"], noise_png(seed)) == alices
    assert get(app, alices, secrets["bob"]).status_code == 200


def test_over_mcp_a_key_sees_and_cancels_its_own_jobs_only_from_any_replica(
    apps: list[AppServer], secrets: dict[str, str]
) -> None:
    """The MCP tools take the keys as every route does; with no session kept, a job queued
    through one replica is followed through the other (distributed mode)."""
    first, other = apps[0], apps[-1]
    run = uuid.uuid4().hex[:6]

    def mcp(app: AppServer, who: str, name: str, **arguments):
        return call_tool(app.url("/mcp"), as_(secrets[who]), name, arguments)[0]

    queued = mcp(first, "alice", "generate_image", prompt=f"alice mcp {run}", size="64x64",
                 steps=2, wait=False)  # fmt: skip
    job_id = queued.structured_content["id"]
    wait_for(first, job_id, secrets["alice"], {"succeeded"})
    done = mcp(other, "alice", "get_job", job_id=job_id)
    assert [block.type for block in done.content][:2] == ["image", "resource_link"]
    image_id = done.structured_content["job"]["image"]["id"]
    assert "owner" not in done.structured_content["job"]
    admin = mcp(other, "root", "get_job", job_id=job_id)
    assert admin.structured_content["job"]["owner"] == "alice"
    for refused in (
        mcp(other, "bob", "get_job", job_id=job_id),
        mcp(first, "bob", "cancel_job", job_id=job_id),
        mcp(first, "bob", "edit_image", prompt="not mine", image_id=image_id, wait=False),
    ):
        assert refused.is_error and "No such" in refused.content[0].text, refused.content
