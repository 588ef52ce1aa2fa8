"""The openai SDK's `quality`, unchanged: each value runs its documented recipe (low: half the
model's default steps, at least 1; medium, auto and dall-e-3's standard: the defaults; high
and dall-e-3's hd: 1.5 times them), an explicit `steps` still wins, and an unknown value is a
400 naming `quality` with nothing queued. The package's app runs GEN_DEFAULT_STEPS=2 (no
preset), so the recipes are 1, 2 and 3 steps. A recipe under a few-step LoRA's preset:
tests/imagegen/generation/test_loras_generate.py."""

import io
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
from PIL import Image

from tests.imagegen.api.clients.conftest import TOKEN, jobs
from tests.support.processes import AppServer

RECIPES = {"low": 1, "medium": 2, "auto": 2, "standard": 2, "high": 3, "hd": 3, "HD": 3}
NAMES = {"low": "low", "medium": "medium", "auto": "medium", "standard": "medium",
         "high": "high", "hd": "high", "HD": "high"}  # fmt: skip


def client(app: AppServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=app.url("/v1"), api_key=TOKEN, max_retries=0)


@pytest.mark.both_modes
def test_each_quality_runs_its_recipe(app):
    def generate(quality: str) -> str | None:
        made = client(app).images.generate(
            prompt=f"a quality {quality} kite",
            size="64x64",
            quality=quality,  # type: ignore[arg-type]
            extra_body={"seed": 5},
        )
        return made.data[0].b64_json

    # All at once: their waits for the queue overlap (each is a job of its own).
    with ThreadPoolExecutor(len(RECIPES)) as pool:
        assert all(pool.map(generate, RECIPES))
    for quality, steps in RECIPES.items():
        (job,) = jobs(app, f"a quality {quality} kite")
        assert (job["parameters"]["steps"], job["parameters"]["quality"]) == (steps, NAMES[quality])


def test_an_explicit_steps_wins_over_quality(app):
    prompt = "a quality kite with steps"
    client(app).images.generate(
        prompt=prompt,
        size="64x64",
        quality="low",
        extra_body={"steps": 3},  # type: ignore[arg-type]
    )
    (job,) = jobs(app, prompt)
    assert (job["parameters"]["steps"], job["parameters"]["adjusted"]) == (3, [])


def test_an_unknown_quality_is_a_400_naming_it_and_nothing_is_queued(app):
    before = len(jobs(app))
    with pytest.raises(openai.BadRequestError) as refused:
        client(app).images.generate(prompt="a bad quality", size="64x64", quality="ultra")  # type: ignore[arg-type]
    assert "quality" in refused.value.message
    assert "must be one of low, medium, high, auto, standard, hd; got 'ultra'" in str(refused.value)
    assert len(jobs(app)) == before


def test_an_edit_takes_quality_too(app):
    picture = io.BytesIO()
    Image.new("RGB", (64, 64), (10, 120, 200)).save(picture, format="PNG")
    edit = client(app).images.edit(
        image=("in.png", picture.getvalue(), "image/png"), prompt="a quality edit",
        quality="high", extra_body={"strength": 1},
    )  # fmt: skip
    assert edit.data[0].b64_json
    (job,) = jobs(app, "a quality edit")
    assert (job["parameters"]["steps"], job["parameters"]["quality"]) == (3, "high")
    with pytest.raises(openai.BadRequestError) as refused:
        client(app).images.edit(
            image=("in.png", picture.getvalue(), "image/png"),
            prompt="a bad quality edit",
            quality="best",  # type: ignore[arg-type]
        )
    assert "quality" in refused.value.message
    assert jobs(app, "a bad quality edit") == []
