"""MODELS: the models offered beside MODEL_ID, how an entry is written, what a malformed one
does to the start, and how a request's name finds a model (imagegen/generation/catalog.py)."""

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from imagegen import backend
from imagegen.generation.catalog import ModelEntry, UnknownModel, parse_models
from tests.support.commands import run_command
from tests.support.in_process import settings_for
from tests.support.model_service import SD_REPO, SDXL_REPO


def catalog(**env: str):
    """The catalog a process started with `env` (over the test service's MODEL_ID) offers."""
    with override_settings(**settings_for({"MODEL_ID": SD_REPO, "GEN_DEFAULT_STEPS": "2", **env})):
        return backend.catalog_of(backend.offered_sources(), backend.rules_from_settings())


def test_entries_are_repo_ids_with_an_optional_revision():
    assert parse_models(" org/one , Org/two@v1.0,org/three@0123abcd ,") == [
        ModelEntry("org/one"),
        ModelEntry("Org/two", "v1.0"),
        ModelEntry("org/three", "0123abcd"),
    ]
    assert parse_models("") == []


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("org/one, not a repo", "'not a repo' is not a hub repo id"),
        ("org/one,noslash", "'noslash' is not a hub repo id"),
        ("org/one@", "'org/one@' has no usable revision"),
        ("org/one@a@b", "'org/one@a@b' has no usable revision"),
        ("org/one,ORG/one@v2", "'ORG/one' is listed twice"),
        (SD_REPO, f"'{SD_REPO}' is MODEL_ID, offered already"),
    ],
)
def test_a_malformed_entry_stops_the_start_naming_it(value, named):
    """The app's start (manage.py check's, as a web process's) refuses it."""
    with pytest.raises(ImproperlyConfigured, match=f"^MODELS: {named}"):
        run_command("check", env={"MODEL_ID": SD_REPO, "MODELS": value})


def test_without_models_only_model_id_is_offered_with_its_own_rules():
    offered = catalog()
    assert offered.ids == [SD_REPO]
    assert offered.default.default and offered.default.rules.steps == 2  # GEN_DEFAULT_STEPS
    assert offered.default.source.adapters == () and not offered.several


def test_an_entry_gets_its_preset_and_none_of_model_ids_extras():
    """MODEL_ID's GEN_DEFAULT_STEPS=2, adapters and tiny decoder stay MODEL_ID's; the turbo
    entry is recognised as SDXL-Turbo (1 step, no guidance), the plain one has no preset."""
    offered = catalog(
        MODEL_ID="stabilityai/stable-diffusion-xl-base-1.0",
        MODELS=f"stabilityai/sdxl-turbo, {SDXL_REPO}@v2",
    )
    default, turbo, plain = offered.models
    assert default.default and default.rules.preset == "sdxl-lightning-4step"
    assert default.rules.steps == 2 and default.source.adapters and default.source.decoder.tiny
    assert turbo.rules.preset == "turbo" and (turbo.rules.steps, turbo.rules.guidance) == (1, 0)
    assert plain.rules.preset is None and (plain.rules.steps, plain.rules.guidance) == (20, 7)
    for entry in (turbo, plain):
        assert entry.source.adapters == () and not entry.source.decoder.tiny
        assert entry.source.inpaint is None
    assert plain.source.revision == "v2" and plain.source.model_dir == default.source.model_dir


def test_a_request_names_a_model_by_repo_id_or_unique_name_part():
    offered = catalog(MODELS=f"{SDXL_REPO}, other/tiny-sd")
    assert offered.find(SDXL_REPO).id == SDXL_REPO
    assert offered.find("TestOrg/Tiny-SDXL").id == SDXL_REPO
    assert offered.find("tiny-sdxl").id == SDXL_REPO
    assert offered.find("other/tiny-sd").id == "other/tiny-sd"
    with pytest.raises(UnknownModel) as shared:
        offered.find("tiny-sd")  # testorg/tiny-sd and other/tiny-sd
    assert shared.value.field == "model"
    assert "names more than one offered model" in shared.value.rule
    with pytest.raises(UnknownModel) as unknown:
        offered.find("dall-e-3")
    assert unknown.value.rule == (
        f"'dall-e-3' is not offered; offered: {SD_REPO}, {SDXL_REPO}, other/tiny-sd"
    )
