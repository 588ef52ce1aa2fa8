"""The page's form as the server renders it, in process: its bounds, defaults and scheduler
choices are the ones the API enforces, for the model configured (a preset narrows them), and
the edit's fields (strength, mask blur) the edit API's."""

import re

import pytest
from django.test import Client

from imagegen import backend
from imagegen.backend import rules_from_settings
from imagegen.generation.requests import MASK_BLUR_DEFAULT, MASK_BLUR_MAX, STRENGTH_DEFAULT
from imagegen.generation.schedulers import NAMES


def options(html: str) -> list[str]:
    select = html.split('<select id="scheduler"', 1)[1].split("</select>", 1)[0]
    return re.findall(r'<option value="([^"]*)"', select)


@pytest.fixture
def base_model(settings, monkeypatch):
    """The rules of a process configured for the base model as it is (MODEL_ADAPTERS set
    to empty: no preset), in this process."""
    settings.MODEL_ADAPTERS = ()
    monkeypatch.setattr(backend.current_backend().jobs, "rules", rules_from_settings())


def test_the_form_offers_the_apis_bounds_and_every_scheduler(settings, base_model):
    html = Client().get("/ui/").content.decode()
    assert options(html) == ["", *NAMES]
    assert f'max="{settings.GEN_MAX_STEPS}"' in html
    assert f'max="{settings.GEN_MAX_GUIDANCE}"' in html
    assert f"multiples of 8, {settings.GEN_MIN_SIDE} to {settings.GEN_MAX_SIDE}" in html
    assert "No model preset." in html
    count = html.split('<input id="count"', 1)[1].split(">", 1)[0]
    assert 'min="1"' in count and f'max="{settings.GEN_MAX_N}"' in count  # the batch count


@pytest.fixture
def turbo(settings, monkeypatch):
    """The rules of a process configured for SDXL-Turbo (its preset; another MODEL_ID than
    the default has no default adapter), in this process."""
    settings.MODEL_ID, settings.MODEL_ADAPTERS = "stabilityai/sdxl-turbo", ()
    monkeypatch.setattr(backend.current_backend().jobs, "rules", rules_from_settings())


def test_a_model_preset_narrows_the_schedulers_and_sets_the_defaults(turbo):
    html = Client().get("/ui/").content.decode()
    assert "Model preset: turbo." in html
    assert options(html) == ["", "ddim_trailing", "dpmpp_2m_trailing", "euler_a_trailing",
                             "euler_trailing"]  # fmt: skip
    assert "Default (Euler a SGM Uniform)" in html  # A1111's name, as records say it
    assert '<option value="euler_a_trailing">Euler a SGM Uniform</option>' in html
    assert 'placeholder="1"' in html  # its one step
    assert "above 4 lowered to 4" in html


def test_the_edit_fields_offer_the_apis_defaults_and_bounds(base_model):
    html = Client().get("/ui/").content.decode()
    strength = html.split('<input id="strength"', 1)[1].split(">", 1)[0]
    assert f'placeholder="{STRENGTH_DEFAULT}"' in strength and 'max="1"' in strength
    blur = html.split('<input id="mask_blur"', 1)[1].split(">", 1)[0]
    assert f'placeholder="{MASK_BLUR_DEFAULT}"' in blur and f'max="{MASK_BLUR_MAX}"' in blur
    assert '<canvas id="mask" role="img" aria-label="Mask"' in html
    brush = html.split('<input id="brush-size"', 1)[1].split(">", 1)[0]
    assert all(bound in brush for bound in ('min="1"', 'max="256"', 'value="16"'))


@pytest.mark.parametrize(
    ("broker", "label"),
    [("", "Weights downloaded"), ("redis://127.0.0.1:1/0", "Weights on the share")],
)
def test_the_model_panel_speaks_of_a_share_only_in_distributed_mode(settings, broker, label):
    """One machine has no share: MODEL_DIR is its own folder (the mode is read, not entered)."""
    settings.JOB_BROKER_URL = broker
    html = Client().get("/ui/").content.decode()
    assert f"<dt>{label}</dt>" in html
    assert "Weights on the share" not in html or broker
