"""Defaults that follow the model and the caps on what clients send, in-process: which preset
MODEL_ID and MODEL_ADAPTERS mean, how the GEN_* settings win over it, and what a request that
was chosen for another model gets. The adapter files need not exist: the defaults follow the
settings, not the loaded weights."""

import importlib
import os
import re
from collections.abc import Iterator

import pytest
from django.core.exceptions import ImproperlyConfigured

import config.settings
from imagegen.backend import rules_from_settings
from imagegen.checks import refuse_bad_settings
from imagegen.generation.parameters import with_defaults
from imagegen.generation.presets import (
    Adjustment,
    generation_rules,
    lora_preset,
    preset_for,
    preset_named,
)
from imagegen.generation.requests import GenerationRequest, LoraUse
from imagegen.model.adapters import parse_adapters

SDXL = "stabilityai/stable-diffusion-xl-base-1.0"
LCM = "latent-consistency/lcm-lora-sdxl:pytorch_lora_weights.safetensors"
HYPER_4 = "ByteDance/Hyper-SD:Hyper-SDXL-4steps-lora.safetensors"
LIGHTNING_4 = "ByteDance/SDXL-Lightning:sdxl_lightning_4step_lora.safetensors"


def preset(model_id: str = SDXL, adapters: str = ""):
    return preset_for(model_id=model_id, adapters=parse_adapters(adapters))


@pytest.mark.parametrize(
    ("model_id", "adapters", "expected"),
    [
        (SDXL, LCM, ("lcm-lora", 4, 1.0, "lcm", 8, 1.0)),
        (SDXL, "latent-consistency/lcm-lora-sdv1-5:pytorch_lora_weights.safetensors",
         ("lcm-lora", 4, 1.0, "lcm", 8, 1.0)),
        (SDXL, HYPER_4, ("hyper-sd-4step", 4, 0.0, "ddim_trailing", 8, 1.0)),
        (SDXL, "ByteDance/Hyper-SD:Hyper-SDXL-1step-lora.safetensors",
         ("hyper-sd-1step", 1, 0.0, "tcd", 8, 1.0)),
        (SDXL, "ByteDance/Hyper-SD:Hyper-SDXL-8steps-CFG-lora.safetensors",
         ("hyper-sd-8step-cfg", 8, 5.0, "ddim_trailing", 8, 8.0)),
        (SDXL, "ByteDance/Hyper-SD:Hyper-SDXL-8steps-lora.safetensors",
         ("hyper-sd-8step", 8, 0.0, "ddim_trailing", 8, 1.0)),
        (SDXL, "ByteDance/Hyper-SD:Hyper-SD15-2steps-lora.safetensors",
         ("hyper-sd-2step", 2, 0.0, "ddim_trailing", 8, 1.0)),
        # Lightning is capped at the steps it was distilled for.
        (SDXL, LIGHTNING_4, ("sdxl-lightning-4step", 4, 0.0, "euler_trailing", 4, 1.0)),
        (SDXL, "ByteDance/SDXL-Lightning:sdxl_lightning_8step_lora.safetensors",
         ("sdxl-lightning-8step", 8, 0.0, "euler_trailing", 8, 1.0)),
        (SDXL, "h1t/TCD-SDXL-LoRA:pytorch_lora_weights.safetensors",
         ("tcd-lora", 4, 0.0, "tcd", 8, 1.0)),
        ("stabilityai/sdxl-turbo", "", ("turbo", 1, 0.0, "euler_a_trailing", 4, 1.0)),
        ("StabilityAI/SDXL-Turbo", "", ("turbo", 1, 0.0, "euler_a_trailing", 4, 1.0)),
        ("stabilityai/sd-turbo", "", ("turbo", 1, 0.0, "euler_a_trailing", 4, 1.0)),
        # An adapter changes what its base model needs: it wins over the model's preset.
        ("stabilityai/sdxl-turbo", LCM, ("lcm-lora", 4, 1.0, "lcm", 8, 1.0)),
        # An unrelated adapter before a known one does not hide it.
        (SDXL, f"org/style:style.safetensors,{LIGHTNING_4}",
         ("sdxl-lightning-4step", 4, 0.0, "euler_trailing", 4, 1.0)),
    ],
)  # fmt: skip
def test_the_configured_model_selects_its_preset(model_id, adapters, expected):
    found = preset(model_id, adapters)
    assert (found.name, found.steps, found.guidance, found.scheduler, found.max_steps,
            found.max_guidance) == expected  # fmt: skip
    assert found.scheduler in found.schedulers


@pytest.mark.parametrize(
    ("model_id", "adapters"),
    [
        (SDXL, ""),
        ("stabilityai/sdxl-turbo-finetune", ""),  # whole ids only, not look-alikes
        (SDXL, "ByteDance/SDXL-Lightning:sdxl_lightning_4step_unet.safetensors"),  # not a LoRA
        (SDXL, "someone/lcm-lora-sdxl:pytorch_lora_weights.safetensors"),
    ],
)
def test_other_models_have_no_preset(model_id, adapters):
    assert preset(model_id, adapters) is None


def rules(found=None, **settings):
    values = {
        "default_steps": None, "default_guidance": None, "default_scheduler": None,
        "steps_cap": None, "guidance_cap": None, "max_steps": 100, "max_guidance": 30.0,
    } | settings  # fmt: skip
    return generation_rules(preset=found, **values)


def settle(found=None, *, steps=None, guidance=None, scheduler=None, **settings):
    return rules(found, **settings).settle(steps=steps, guidance=guidance, scheduler=scheduler)


def test_without_a_preset_the_defaults_are_the_seed_ones_and_nothing_is_clamped():
    assert settle() == (20, 7.0, None, [])
    assert settle(steps=100, guidance=30.0, scheduler="lcm") == (50, 30.0, "lcm", [
        Adjustment(field="steps", asked=100, applied=50)  # LCM picks from 50 timesteps
    ])  # fmt: skip
    assert settle(steps=80, guidance=12.0, scheduler="euler_a") == (80, 12.0, "euler_a", [])


def test_an_omitted_field_gets_the_preset_default():
    assert settle(preset(SDXL, LCM)) == (4, 1.0, "lcm", [])
    assert settle(preset(SDXL, LIGHTNING_4)) == (4, 0.0, "euler_trailing", [])
    assert settle(preset("stabilityai/sdxl-turbo")) == (1, 0.0, "euler_a_trailing", [])


def test_a_value_chosen_for_another_model_is_held_to_the_preset_and_reported():
    """webuiapi's defaults (20 steps, CFG 7, Euler a) against a Lightning LoRA."""
    steps, guidance, scheduler, adjusted = settle(
        preset(SDXL, LIGHTNING_4), steps=20, guidance=7.0, scheduler="euler_a"
    )
    assert (steps, guidance, scheduler) == (4, 1.0, "euler_trailing")  # its own 4 steps
    assert [a.header() for a in adjusted] == [
        "scheduler euler_a->euler_trailing", "steps 20->4", "guidance 7->1"
    ]  # fmt: skip


def test_values_within_the_preset_are_kept():
    assert settle(preset(SDXL, LCM), steps=6, guidance=0.0, scheduler="lcm") == (6, 0.0, "lcm", [])
    assert settle(preset(SDXL, HYPER_4), steps=2, scheduler="tcd") == (2, 0.0, "tcd", [])
    assert settle(preset(SDXL, HYPER_4), guidance=1.0) == (4, 1.0, "ddim_trailing", [])


def test_explicit_defaults_win_over_the_preset_and_lift_its_caps():
    found = preset(SDXL, LCM)
    settled = settle(found, default_steps=12, default_guidance=1.5, default_scheduler="euler")
    assert settled == (12, 1.5, "euler", [])
    explicit = {"default_steps": 12, "default_guidance": 1.5, "default_scheduler": "euler"}
    assert settle(found, steps=12, guidance=1.5, scheduler="euler", **explicit) == settled
    assert settle(found, steps=13, default_steps=12)[0] == 12  # the lifted cap is the default


def test_explicit_caps_win_over_the_preset_and_bound_its_defaults():
    assert settle(preset(SDXL, LCM), steps=20, steps_cap=30)[0] == 20
    assert settle(preset(SDXL, LCM), guidance=7.0, guidance_cap=8.0)[1] == 7.0
    # Without a preset: GEN_STEPS_CAP=8 alone makes the default 8 too.
    assert settle(steps_cap=8)[0] == 8
    steps, guidance, _, adjusted = settle(steps=30, guidance=9.0, steps_cap=8, guidance_cap=5.0)
    assert (steps, guidance) == (8, 5.0)
    assert [a.header() for a in adjusted] == ["steps 30->8", "guidance 9->5"]


def test_defaults_stay_within_the_form_bounds():
    assert settle(preset(SDXL, LCM), max_steps=2, max_guidance=0.5)[:2] == (2, 0.5)


def test_with_defaults_puts_the_applied_values_and_the_changes_in_the_request():
    request = GenerationRequest(prompt="a cat", steps=20, guidance=7.0, scheduler="euler_a")
    settled = with_defaults(request, rules=rules(preset(SDXL, LCM)))
    assert (settled.steps, settled.guidance, settled.scheduler) == (8, 1.0, "lcm")
    assert [a.header() for a in settled.adjusted] == [
        "scheduler euler_a->lcm", "steps 20->8", "guidance 7->1"
    ]  # fmt: skip
    assert settled.seed is not None


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({"MODEL_ADAPTERS": LCM}, ("lcm-lora", 4, 1.0, "lcm", 8, 1.0)),
        ({"MODEL_ID": "stabilityai/sdxl-turbo"}, ("turbo", 1, 0.0, "euler_a_trailing", 4, 1.0)),
        ({"MODEL_ADAPTERS": LCM, "GEN_FOLLOW_MODEL": False}, (None, 20, 7.0, None, None, None)),
        ({"MODEL_ADAPTERS": LCM, "GEN_DEFAULT_STEPS": 6, "GEN_GUIDANCE_CAP": 2.0},
         ("lcm-lora", 6, 1.0, "lcm", 8, 2.0)),
        ({}, (None, 20, 7.0, None, None, None)),
    ],
)  # fmt: skip
def test_the_service_rules_come_from_the_settings(settings, variables, expected):
    settings.MODEL_ID = SDXL
    settings.MODEL_ADAPTERS = ()
    for name, value in variables.items():
        setattr(settings, name, parse_adapters(value) if name == "MODEL_ADAPTERS" else value)
    found = rules_from_settings()
    assert (found.preset, found.steps, found.guidance, found.scheduler, found.max_steps,
            found.max_guidance) == expected  # fmt: skip


@pytest.fixture
def environment() -> Iterator[None]:
    """config/settings.py executed again with a changed environment, then restored."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)
    importlib.reload(config.settings)


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"GEN_DEFAULT_SCHEDULER": "Euler a"}, "GEN_DEFAULT_SCHEDULER must be one of euler, "),
        ({"GEN_STEPS_CAP": "0"}, "GEN_STEPS_CAP must be at least 1, got 0"),
        ({"GEN_GUIDANCE_CAP": "-1"}, "GEN_GUIDANCE_CAP must be at least 0, got -1"),
        ({"GEN_DEFAULT_STEPS": "9", "GEN_STEPS_CAP": "8"}, "GEN_DEFAULT_STEPS must be at most"),
        ({"GEN_DEFAULT_GUIDANCE": "2", "GEN_GUIDANCE_CAP": "1"}, "GEN_DEFAULT_GUIDANCE must be at"),
        ({"GEN_FOLLOW_MODEL": "perhaps"}, "GEN_FOLLOW_MODEL must be a boolean"),
    ],
)
def test_a_bad_generation_setting_refuses_to_start(environment, variables, message):
    os.environ.update(variables)
    with pytest.raises(ImproperlyConfigured, match=re.escape(message)):
        refuse_bad_settings(importlib.reload(config.settings))


def test_unset_defaults_are_none_so_the_preset_decides(environment):
    for name in ("GEN_DEFAULT_STEPS", "GEN_DEFAULT_GUIDANCE", "GEN_DEFAULT_SCHEDULER",
                 "GEN_STEPS_CAP", "GEN_GUIDANCE_CAP", "GEN_FOLLOW_MODEL"):  # fmt: skip
        os.environ.pop(name, None)
    loaded = importlib.reload(config.settings)
    assert (loaded.GEN_DEFAULT_STEPS, loaded.GEN_DEFAULT_GUIDANCE, loaded.GEN_DEFAULT_SCHEDULER,
            loaded.GEN_STEPS_CAP, loaded.GEN_GUIDANCE_CAP) == (None,) * 5  # fmt: skip
    assert loaded.GEN_FOLLOW_MODEL is True


# --- a request's few-step LoRA and OpenAI's quality --------------------------------------------


@pytest.mark.parametrize(
    ("repo", "file", "name"),
    [
        ("latent-consistency/lcm-lora-sdxl", "pytorch_lora_weights.safetensors", "lcm-lora"),
        ("h1t/TCD-SDXL-LoRA", "pytorch_lora_weights.safetensors", "tcd-lora"),
        ("ByteDance/SDXL-Lightning", "sdxl_lightning_8step_lora.safetensors",
         "sdxl-lightning-8step"),
        ("ByteDance/Hyper-SD", "Hyper-SDXL-12steps-CFG-lora.safetensors", "hyper-sd-12step-cfg"),
        # A dropped file (no repo), or another repo's copy: the published file name alone.
        (None, "sdxl_lightning_2step_lora.safetensors", "sdxl-lightning-2step"),
        ("someone/mirror", "Hyper-SD15-1step-lora.safetensors", "hyper-sd-1step"),
        (None, "lcm-lora-sdv1-5.safetensors", "lcm-lora"),
        (None, "TCD-SD15-LoRA.safetensors", "tcd-lora"),
        (None, "pytorch_lora_weights.safetensors", None),
        ("someone/style", "pixel_art.safetensors", None),
    ],
)  # fmt: skip
def test_a_request_s_lora_is_recognised_as_its_recipe(repo, file, name):
    found = lora_preset(repo=repo, file=file)
    assert (found and found.name) == name
    if found is not None:
        assert preset_named(found.name) == found  # the request carries the name; it comes back


def test_a_lora_s_recipe_replaces_the_model_s_defaults_but_not_its_caps():
    model = rules(preset(SDXL, LIGHTNING_4), default_steps=3, steps_cap=6)
    under = model.under(preset(SDXL, LCM))
    assert under.preset == "lcm-lora"
    assert (under.steps, under.guidance, under.scheduler) == (4, 1.0, "lcm")
    assert under.max_steps == 6  # GEN_STEPS_CAP still holds
    request = GenerationRequest(prompt="a cat", loras=(
        LoraUse(name="lcm", weight=1.0, path="loras/lcm.safetensors", preset="lcm-lora"),
    ))  # fmt: skip
    settled = with_defaults(request, rules=model)
    assert (settled.steps, settled.scheduler, settled.preset) == (4, "lcm", "lcm-lora")
    off = request.model_copy(update={"loras": (request.loras[0].model_copy(update={"weight": 0}),)})
    assert with_defaults(off, rules=model).steps == 3  # weight 0: the model's own


@pytest.mark.parametrize(
    ("quality", "plain", "lightning", "lcm"),
    [("low", 10, 2, 2), ("medium", 20, 4, 4), (None, 20, 4, 4), ("high", 30, 4, 6)],
)
def test_a_quality_scales_the_default_steps_within_the_recipe_s_cap(quality, plain, lightning, lcm):
    for found, expected in ((None, plain), (preset(SDXL, LIGHTNING_4), lightning),
                            (preset(SDXL, LCM), lcm)):  # fmt: skip
        assert (
            rules(found).settle(steps=None, guidance=None, scheduler=None, quality=quality)[0]
            == expected
        )
    assert rules(None).settle(steps=7, guidance=None, scheduler=None, quality="low")[0] == 7
