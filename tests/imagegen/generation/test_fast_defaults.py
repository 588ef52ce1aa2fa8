"""Defaults that follow the model, over HTTP to the app served from this process: an app whose
MODEL_ID is stabilityai/sdxl-turbo answers a bare prompt with SDXL-Turbo's 1 step, no guidance
and its trailing Euler a, and holds a request chosen for another model (webuiapi's 20 steps,
CFG 7, "Euler a") to what the model can use, saying so in X-Adjusted, the job and the record.

The repository is the tests' tiny random SDXL pipeline served by the local hub under the id
stabilityai/sdxl-turbo: the service recognises the model by the id it is configured with
(as it would the real one), and the images are noise either way. LoRA presets (MODEL_ADAPTERS)
are tested in-process (test_presets.py): they follow the setting, not the adapter's file."""

from collections.abc import Iterator

import pytest
import requests

from tests.support.in_process import LoopbackApp, ready_here
from tests.support.tiny_model import build_tiny_pipeline

TURBO = "stabilityai/sdxl-turbo"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackApp]:
    hub_root = tmp_path_factory.mktemp("turbo-hub")
    build_tiny_pipeline(hub_root / TURBO, layout="sdxl")
    work = tmp_path_factory.mktemp("turbo")
    # GEN_DEFAULT_STEPS empty: unset, so the preset decides (the test env sets 2 otherwise).
    with ready_here(hub_root, work, MODEL_ID=TURBO, GEN_DEFAULT_STEPS="") as server:
        yield server


def generate(app: LoopbackApp, **fields: str) -> requests.Response:
    response = requests.post(app.url("/generate"), data=fields, timeout=120)
    assert response.status_code == 200, response.text
    return response


def applied(response: requests.Response) -> tuple[str, str, str]:
    return tuple(response.headers[h] for h in ("X-Steps", "X-Guidance", "X-Scheduler"))


def test_a_bare_prompt_gets_the_model_defaults_everywhere(app):
    response = generate(app, prompt="a lighthouse", seed="5")
    assert applied(response) == ("1", "0", "Euler a SGM Uniform")  # euler_a_trailing
    assert "X-Adjusted" not in response.headers
    record = requests.get(app.url(f"/images/{response.headers['X-Image-Id']}")).json()
    parameters = record["parameters"]
    assert (parameters["steps"], parameters["guidance"], parameters["scheduler"]) == (
        1, 0.0, "Euler a SGM Uniform"
    )  # fmt: skip
    job = requests.get(app.url(f"/jobs/{response.headers['X-Job-Id']}")).json()["parameters"]
    assert (job["steps"], job["guidance"], job["scheduler"], job["adjusted"]) == (
        1, 0.0, "Euler a SGM Uniform", []
    )  # fmt: skip


def test_values_chosen_for_another_model_are_clamped_and_reported(app):
    response = generate(
        app, prompt="a lighthouse", seed="5", steps="20", guidance="7", scheduler="euler_a"
    )
    assert applied(response) == ("4", "1", "Euler a SGM Uniform")
    assert response.headers["X-Adjusted"] == (
        "scheduler Euler a->Euler a SGM Uniform, steps 20->4, guidance 7->1"
    )
    record = requests.get(app.url(f"/images/{response.headers['X-Image-Id']}")).json()
    assert (record["parameters"]["steps"], record["parameters"]["guidance"]) == (4, 1.0)
    job = requests.get(app.url(f"/jobs/{response.headers['X-Job-Id']}")).json()["parameters"]
    assert job["adjusted"] == [
        {"field": "scheduler", "asked": "Euler a", "applied": "Euler a SGM Uniform"},
        {"field": "steps", "asked": 20, "applied": 4},
        {"field": "guidance", "asked": 7.0, "applied": 1.0},
    ]


def test_values_the_model_can_use_are_kept(app):
    response = generate(
        app, prompt="a lighthouse", steps="3", guidance="0.5", scheduler="ddim_trailing"
    )
    assert applied(response) == ("3", "0.5", "DDIM SGM Uniform")
    assert "X-Adjusted" not in response.headers


def test_a_queued_job_shows_what_will_run_from_the_start(app):
    response = requests.post(
        app.url("/generate"), data={"prompt": "a kite", "steps": "9", "async": "true"}
    )
    assert response.status_code == 202
    parameters = response.json()["parameters"]
    assert (parameters["steps"], parameters["scheduler"]) == (4, "Euler a SGM Uniform")
    assert parameters["adjusted"] == [{"field": "steps", "asked": 9, "applied": 4}]


def test_the_index_names_the_preset_and_its_rules(app):
    """The rules speak of what a request may send: the `scheduler` field's ids."""
    rules = requests.get(app.url("/api")).json()["generation"]
    assert rules == {
        "preset": "turbo", "steps": 1, "guidance": 0.0, "scheduler": "euler_a_trailing",
        "max_steps": 4, "max_guidance": 1.0,
        "schedulers": ["ddim_trailing", "dpmpp_2m_trailing", "euler_a_trailing", "euler_trailing"],
        "adapters": [],  # another MODEL_ID than the default: no default LoRA
    }  # fmt: skip
