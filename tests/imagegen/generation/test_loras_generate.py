"""A prompt's `<lora:name:weight>` tags: the LoRA runs for that image alone (the next image
without it is, pixel for pixel, the one made before any LoRA ran; weight 0 is the image
without it), the encoders see the prompt without its tags and the prompt cache keeps the
LoRA's encoding apart, the record keeps the prompt as written; an unknown name, a LoRA of
another model or a weight outside [-4, 4] is a 400 naming the tag and a LORAS entry not on
the share a 409, nothing queued; webuiapi's txt2img with a tag. In process (served_here),
MODEL_ID the tiny SD model, MODELS the tiny SDXL one."""

import io
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import requests
import webuiapi
from PIL import Image

from imagegen.generation.schedulers import SCHEDULERS
from imagegen.model import prompt_cache
from imagegen.model.loras import repo_path
from imagegen.model.share import MANIFEST_NAME, sha256_of
from tests.support.in_process import LoopbackApp, openai_client, served_here
from tests.support.local_hub import LocalHub
from tests.support.model_service import (
    PULL_TIMEOUT,
    SD_REPO,
    SDXL_REPO,
    model_service_env,
    pull_until_ready,
    ready_in_mode,
)
from tests.support.tiny_adapters import KOHYA_FILE, LORA_REPO, SDXL_FILE, build_adapter_repos

FIELDS = {"seed": "7", "steps": "2", "guidance": "5", "size": "64x64"}
LORAS = f"{LORA_REPO}:{KOHYA_FILE}=style, {LORA_REPO}:{SDXL_FILE}=xl"


@pytest.fixture(scope="module")
def app(hub_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackApp]:
    build_adapter_repos(hub_root, sd_repo=SD_REPO, sdxl_repo=SDXL_REPO)
    work = tmp_path_factory.mktemp("lora-generate")
    with LocalHub(hub_root) as hub:
        env = model_service_env(hub.url, work / "share", work)
        with served_here(**env, MODELS=SDXL_REPO, LORAS=LORAS) as served:
            pull_until_ready(served)
            drop_recipe_loras(hub_root, Path(env["MODEL_DIR"]) / "loras")
            requests.post(served.url("/sdapi/v1/refresh-loras"), timeout=30).raise_for_status()
            yield served


# Tiny random LoRAs (the SD one of testorg/tiny-lora) under the names the few-step LoRAs are
# published with, dropped into MODEL_DIR/loras: the name alone is the recipe. (Lightning's is
# an SDXL LoRA's name on an SD-shaped file: the fit rule reads the layers, the recipe the name.)
RECIPE_REPO = "testorg/few-step-names"  # the same files as a LORAS entry's repo
RECIPE_FILES = {
    "Hyper-SD15-8steps-lora": ("hyper-sd-8step", 8, 0.0, "ddim_trailing"),
    "lcm-lora-sdv1-5": ("lcm-lora", 4, 1.0, "lcm"),
    "TCD-SD15-LoRA": ("tcd-lora", 4, 0.0, "tcd"),
    "sdxl_lightning_2step_lora": ("sdxl-lightning-2step", 2, 0.0, "euler_trailing"),
}


def drop_recipe_loras(hub_root: Path, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in RECIPE_FILES:
        shutil.copyfile(hub_root / LORA_REPO / KOHYA_FILE, folder / f"{name}.safetensors")


def generate(app: Any, prompt: str, **fields: str) -> requests.Response:
    data = {**FIELDS, "prompt": prompt, **fields}
    return requests.post(app.url("/generate"), data=data, timeout=120)


def pixels(answer: requests.Response) -> bytes:
    assert answer.status_code == 200, answer.text
    return Image.open(io.BytesIO(answer.content)).convert("RGB").tobytes()


def test_a_lora_runs_for_its_image_alone_and_weight_0_is_the_image_without_it(app):
    cache = prompt_cache.cache_of(app.backend.loader.pipeline(60))
    assert cache is not None
    before = pixels(generate(app, "a red cube"))
    misses = cache.misses
    tagged = generate(app, "a red cube <lora:style:1.5>")
    assert pixels(tagged) != before
    assert cache.misses == misses + 1  # the LoRA's encoding is its own, not the plain one's
    after = pixels(generate(app, "a red cube"))
    assert after == before  # no state left behind
    assert pixels(generate(app, "a red cube <lora:style:0>")) == before
    # The tag is out of the text the encoders see: the same picture with it at the start.
    assert pixels(generate(app, "<lora:STYLE:1.5> a red cube")) == pixels(tagged)

    job = requests.get(app.url(f"/jobs/{tagged.headers['X-Job-Id']}"), timeout=30).json()
    assert job["parameters"]["prompt"] == "a red cube <lora:style:1.5>"  # as written
    path = f"loras/testorg--tiny-lora/{KOHYA_FILE}"
    short = sha256_of(Path(app.env["MODEL_DIR"]) / path)[:12]
    assert job["parameters"]["loras"] == [
        {"name": "style", "weight": 1.5, "path": path, "hash": short}
    ]
    # The infotext as A1111 writes it: the prompt with its tag, and the LoRA's short hash.
    text = Image.open(io.BytesIO(tagged.content)).text["parameters"]
    assert text.startswith("a red cube <lora:style:1.5>\n")
    assert f'Lora hashes: "style: {short}"' in text


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        (
            "a cube <lora:nope>",
            "<lora:nope>: no LoRA 'nope' is offered; offered: style, xl, "
            + ", ".join(sorted(RECIPE_FILES)),
        ),
        # SDXL is not pulled here: no model on the share has the SDXL LoRA's layers.
        (
            "a cube <lora:xl:1>",
            f"<lora:xl:1>: xl is a LoRA for none of the models on the share, not for {SD_REPO}",
        ),
        ("a cube <lora:style:4.5>", "<lora:style:4.5>: the weight must be in [-4, 4]"),
        ("a cube <lora:style:big>", "<lora:style:big>: the weight must be in [-4, 4]"),
    ],
)
def test_a_bad_tag_is_a_400_naming_it_and_nothing_is_queued(app, prompt, message):
    refused = generate(app, prompt, **{"async": "true"})
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["message"].startswith(f"Invalid request: prompt: {message}")
    assert all(prompt != job["parameters"]["prompt"] for job in jobs(app))


def test_an_offered_lora_not_on_the_share_is_a_409(app):
    manifest = repo_path(Path(app.env["MODEL_DIR"]), LORA_REPO) / MANIFEST_NAME
    kept = manifest.read_bytes()
    manifest.unlink()
    try:
        refused = generate(app, "a cube <lora:style>", **{"async": "true"})
    finally:
        manifest.write_bytes(kept)
    assert refused.status_code == 409, refused.text
    assert "<lora:style>: the LoRA style is offered but not on the share" in refused.text
    assert all(job["parameters"]["prompt"] != "a cube <lora:style>" for job in jobs(app))


def test_webuiapi_txt2img_runs_a_tag(app):
    api = webuiapi.WebUIApi(baseurl=app.url("/sdapi/v1"))
    plain = api.txt2img(prompt="a blue ball", seed=3, steps=2, width=64, height=64)
    tagged = api.txt2img(prompt="a blue ball <lora:style>", seed=3, steps=2, width=64, height=64)
    assert plain.image.convert("RGB").tobytes() != tagged.image.convert("RGB").tobytes()
    assert tagged.info["prompt"] == "a blue ball <lora:style>"
    assert [lora["name"] for lora in api.get_loras()] == ["style", "xl", *sorted(RECIPE_FILES)]


def test_the_openai_sdk_runs_a_tag_and_refuses_an_unknown_one(app):
    client = openai_client(api_key="unused", max_retries=0)
    made = client.images.generate(prompt="a cat <lora:style:0.5>", size="256x256")
    assert made.data and made.data[0].b64_json
    with pytest.raises(openai.BadRequestError) as refused:
        client.images.generate(prompt="a cat <lora:absent>", size="256x256")
    assert "<lora:absent>: no LoRA 'absent' is offered" in refused.value.message


def loras(app: Any) -> dict[str, dict]:
    listed = requests.get(app.url("/sdapi/v1/loras"), timeout=30).json()
    return {lora["name"]: lora for lora in listed}


def jobs(app: LoopbackApp) -> list[dict]:
    return requests.get(app.url("/jobs"), timeout=30).json()


def test_distributed_a_pull_brings_the_loras_and_a_worker_runs_a_tag_for_its_image_alone(
    request: pytest.FixtureRequest, hub_root: Path, tmp_path: Path
):
    """A web replica on the session's shared stack (its Redis, worker and share): its pull
    places LORAS's files; the worker runs the tag from the request as the web side checked it."""
    build_adapter_repos(hub_root, sd_repo=SD_REPO, sdxl_repo=SDXL_REPO)
    recipes = hub_root / RECIPE_REPO
    drop_recipe_loras(hub_root, recipes)
    (recipes / "README.md").write_text("---\nlibrary_name: diffusers\n---\n# Few-step names\n")
    entries = f"{LORAS}, {RECIPE_REPO}:Hyper-SD15-8steps-lora.safetensors=hyper8"
    with ready_in_mode(request, "distributed", hub_root, tmp_path, LORAS=entries) as app:
        pull_until_ready(app, timeout=PULL_TIMEOUT["distributed"])
        # The workers were ready before: the replica's download of the LoRAs runs on.
        deadline = time.monotonic() + PULL_TIMEOUT["distributed"]
        while (style := loras(app)["style"])["models"] != [SD_REPO]:
            assert time.monotonic() < deadline, style
            time.sleep(0.1)
        prompt = "a green pyramid in distributed mode"
        before = pixels(generate(app, prompt))
        tagged = pixels(generate(app, f"{prompt} <lora:style:1.5>"))
        assert tagged != before
        assert pixels(generate(app, prompt)) == before
        # The image's record, written by the worker, keeps the LoRA it ran and its weight.
        made = generate(app, f"{prompt} <lora:style:0.5>")
        job = requests.get(app.url(f"/jobs/{made.headers['X-Job-Id']}"), timeout=30).json()
        assert job["image"]["parameters"]["loras"] == [{"name": "style", "weight": 0.5}]
        # The native field and a LORAS entry's recipe (by its file's name), as in process.
        while loras(app)["hyper8"]["models"] != [SD_REPO]:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        fielded = requests.post(
            app.url("/generate"), data={"prompt": prompt, "lora": "hyper8:0.5", "size": "64x64"},
            timeout=120,
        )  # fmt: skip
        ran = job_of(app, fielded)["parameters"]
        assert (ran["preset"], ran["steps"]) == ("hyper-sd-8step", 8)
        assert ran["loras"][0]["weight"] == 0.5
        # The replica's estimate resolves the request as its /generate does: the recipe's steps
        # from the field and from the tag, and the hires fix's two passes at its target size.
        assert estimate_of(app, prompt=prompt, lora="hyper8:0.5", size="64x64")["steps"] == 8
        assert estimate_of(app, prompt=f"{prompt} <lora:hyper8>", size="64x64")["steps"] == 8
        hires = estimate_of(app, prompt=prompt, size="64x64", steps="2", hires="true",
                            hires_steps="3")  # fmt: skip
        assert (hires["size"], hires["steps"]) == ("128x128", 5)


def estimate_of(app: Any, **fields: str) -> dict:
    answer = requests.get(app.url("/generate/estimate"), params=fields, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


# --- the native form's `lora` fields and JSON's `loras` ---------------------------------------


def job_of(app: Any, answer: requests.Response) -> dict:
    assert answer.status_code in (200, 202), answer.text
    job_id = answer.headers.get("X-Job-Id") or answer.json()["id"]
    return requests.get(app.url(f"/jobs/{job_id}"), timeout=30).json()


def test_lora_fields_and_json_loras_run_as_the_tags_do(app):
    tagged = generate(app, "a red cube <lora:style:1.5>")
    fielded = requests.post(
        app.url("/generate"), data={**FIELDS, "prompt": "a red cube", "lora": "style:1.5"},
        timeout=120,
    )  # fmt: skip
    assert pixels(fielded) == pixels(tagged)
    assert [(u["name"], u["weight"]) for u in job_of(app, fielded)["parameters"]["loras"]] == [
        ("style", 1.5)
    ]
    body = {"prompt": "a red cube", "seed": 7, "steps": 2, "guidance": 5, "size": "64x64",
            "loras": [{"name": "style", "weight": 1.5}]}  # fmt: skip
    sent = requests.post(app.url("/generate"), json=body, timeout=120)
    assert pixels(sent) == pixels(tagged)
    # No weight is weight 1, in a field as in a tag.
    plain = generate(app, "a red cube", lora="style")
    assert pixels(plain) == pixels(generate(app, "a red cube <lora:style>"))
    assert job_of(app, plain)["parameters"]["loras"][0]["weight"] == 1


def test_a_lora_named_twice_runs_once_at_the_sum_of_its_weights(app):
    once = generate(app, "a red cube <lora:style:1.5>")
    twice = generate(app, "a red cube <lora:style:0.5>", lora="STYLE:1")
    assert pixels(twice) == pixels(once)
    (use,) = job_of(app, twice)["parameters"]["loras"]
    assert (use["name"], use["weight"]) == ("style", 1.5)


@pytest.mark.parametrize(
    ("prompt", "fields", "message"),
    [
        ("a cube", {"lora": "nope:1"}, "lora: nope:1: no LoRA 'nope' is offered"),
        ("a cube", {"lora": "style:5"}, "lora: style:5: the weight must be in [-4, 4]"),
        ("a cube", {"lora": ":1"}, "lora: ':1' names no LoRA"),
        ("a cube", {"loras": "style"}, "loras: is not a field of this form"),
        (
            "a cube",
            {"lora": "xl"},
            f"lora: xl: xl is a LoRA for none of the models on the share, not for {SD_REPO}",
        ),
        (
            "a cube <lora:style:3>",
            {"lora": "style:2"},
            "lora: style:2: style is named more than once; its weights add up to 5",
        ),
    ],
)
def test_a_bad_lora_field_is_a_400_naming_it_and_nothing_is_queued(app, prompt, fields, message):
    before = len(jobs(app))
    refused = generate(app, prompt, **fields, **{"async": "true"})
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["message"].startswith(f"Invalid request: {message}")
    assert len(jobs(app)) == before


@pytest.mark.parametrize(
    ("loras", "message"),
    [
        ([{"name": "nope"}], "loras: nope:1: no LoRA 'nope' is offered"),
        ([{"name": "style", "weight": -4.5}], "loras: style:-4.5: the weight must be in [-4, 4]"),
        ([{"name": "style", "scale": 1}], 'loras: must be a list of {"name": "...", "weight"'),
        ([{"name": "style", "weight": "1"}], 'loras: must be a list of {"name": "...", "weight"'),
        ("style", 'loras: must be a list of {"name": "...", "weight"'),
    ],
)
def test_a_bad_json_lora_is_a_400_naming_loras(app, loras, message):
    before = len(jobs(app))
    body = {"prompt": "a cube", "size": "64x64", "async": True, "loras": loras}
    refused = requests.post(app.url("/generate"), json=body, timeout=120)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["message"].startswith(f"Invalid request: {message}")
    assert len(jobs(app)) == before


def test_an_edit_runs_its_lora_field_and_refuses_a_bad_one_before_storing_its_image(app):
    source = io.BytesIO()
    Image.new("RGB", (64, 64), (200, 30, 30)).save(source, format="PNG")
    files = {"image": ("in.png", source.getvalue(), "image/png")}
    data = {**FIELDS, "prompt": "a red cube", "strength": "0.5"}
    edited = requests.post(app.url("/generate"), data={**data, "lora": "style:1.5"}, files=files,
                           timeout=120)  # fmt: skip
    assert pixels(edited) != pixels(requests.post(app.url("/generate"), data=data, files=files,
                                                  timeout=120))  # fmt: skip
    assert job_of(app, edited)["parameters"]["loras"][0]["name"] == "style"
    inputs = Path(app.env["MODEL_DIR"]).parent  # the stores live beside the share
    stored = sorted(p.name for p in inputs.rglob("*") if p.is_file())
    refused = requests.post(app.url("/generate"), data={**data, "lora": "nope", "seed": "8"},
                            files={"image": ("in.png", b"\x89PNG" + bytes(60), "image/png")},
                            timeout=120)  # fmt: skip
    assert refused.status_code == 400 and "lora: nope" in refused.text, refused.text
    assert sorted(p.name for p in inputs.rglob("*") if p.is_file()) == stored


# --- a few-step LoRA's recipe -----------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(RECIPE_FILES))
def test_a_few_step_lora_in_the_prompt_brings_its_recipe(app, name):
    preset, steps, guidance, scheduler = RECIPE_FILES[name]
    data = {"prompt": f"a lamp <lora:{name}>", "size": "64x64", "seed": "3"}
    made = requests.post(app.url("/generate"), data=data, timeout=120)
    ran = job_of(app, made)["parameters"]
    assert (ran["preset"], ran["steps"], ran["guidance"]) == (preset, steps, guidance)
    assert ran["scheduler"] == SCHEDULERS[scheduler].a1111_name
    assert ran["loras"][0]["preset"] == preset
    assert (made.headers["X-Steps"], made.headers["X-Preset"]) == (str(steps), preset)


def test_a_recipe_holds_what_a_client_sends_to_it_and_a_weight_0_brings_none(app):
    # webuiapi's 20 steps and guidance 7 meet the 2-step recipe as they meet the model's preset.
    held = generate(app, "a lamp <lora:sdxl_lightning_2step_lora>", steps="20", guidance="7")
    ran = job_of(app, held)["parameters"]
    assert (ran["steps"], ran["guidance"], ran["preset"]) == (2, 1.0, "sdxl-lightning-2step")
    assert held.headers["X-Adjusted"] == "steps 20->2, guidance 7->1"
    # At weight 0 the LoRA does not run, nor does its recipe: the model's defaults (steps 2,
    # GEN_DEFAULT_STEPS; no preset) run.
    off = job_of(app, requests.post(
        app.url("/generate"), data={"prompt": "a lamp <lora:lcm-lora-sdv1-5:0>", "size": "64x64"},
        timeout=120,
    ))["parameters"]  # fmt: skip
    assert "preset" not in off and off["steps"] == 2 and off["scheduler"] != "LCM"
    # A LoRA that is no recipe leaves the model's defaults.
    styled = job_of(app, generate(app, "a lamp", lora="style"))["parameters"]
    assert "preset" not in styled and "preset" not in styled["loras"][0]
    assert "X-Preset" not in generate(app, "a lamp", lora="style").headers


def test_the_openai_sdk_quality_scales_a_recipe_s_steps(app):
    client = openai_client(api_key="unused", max_retries=0)
    for quality, steps in (("low", 2), ("standard", 4), ("hd", 6)):
        prompt = f"a {quality} kite <lora:lcm-lora-sdv1-5>"
        client.images.generate(prompt=prompt, size="64x64", quality=quality)  # type: ignore[arg-type]
        (ran,) = [job["parameters"] for job in jobs(app) if job["parameters"]["prompt"] == prompt]
        assert (ran["steps"], ran["preset"], ran["scheduler"]) == (steps, "lcm-lora", "LCM")
