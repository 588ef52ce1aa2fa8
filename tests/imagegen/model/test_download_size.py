"""What a pull will download, known before it starts (imagegen.model.download_size): the
documented figure for the model the service ships with and its LoRA, none for any other
configuration, and the page's config that carries it to Pull's label."""

import dataclasses
import json
from pathlib import Path

import pytest
from django.test import Client

from imagegen import backend
from imagegen.model.adapters import DEFAULT_MODEL_ID, parse_adapters
from imagegen.model.decoder import parse_decoder
from imagegen.model.download_size import (
    LIGHTNING_4STEP_LORA_BYTES,
    SDXL_BASE_FP16_BYTES,
    TAESDXL_BYTES,
    documented_download_bytes,
)
from imagegen.model.hub import ModelSource
from imagegen.model.inpaint import parse_inpaint
from imagegen.model.loader import ModelLoader
from tests.support.model_service import SD_REPO

LIGHTNING = "ByteDance/SDXL-Lightning:sdxl_lightning_4step_lora.safetensors"


SHIPPED_BYTES = SDXL_BASE_FP16_BYTES + LIGHTNING_4STEP_LORA_BYTES + TAESDXL_BYTES
TINY = parse_decoder("tiny", "")  # the default decoder of the shipped preset


def default_source(tmp_path: Path, adapters: str = LIGHTNING, **fields) -> ModelSource:
    """MODEL_ID and MODEL_VARIANT at their defaults, with `adapters` (MODEL_ADAPTERS) and
    the tiny decoder (VAE_DECODER's default with those two)."""
    base = ModelSource(
        model_id=DEFAULT_MODEL_ID, revision="main", variant="fp16", model_dir=tmp_path / "share",
        cache_dir=tmp_path / "cache", adapters=parse_adapters(adapters), decoder=TINY,
    )  # fmt: skip
    return dataclasses.replace(base, **fields)


def test_the_default_model_has_a_documented_download_size_with_its_lora_and_decoder(tmp_path):
    assert documented_download_bytes(default_source(tmp_path)) == SHIPPED_BYTES
    assert round(SHIPPED_BYTES / 1e9, 1) == 7.3
    full = parse_decoder("full", "")
    assert documented_download_bytes(default_source(tmp_path, "", decoder=full)) == (
        SDXL_BASE_FP16_BYTES
    )
    scaled = default_source(tmp_path, f"{LIGHTNING}:0.8")  # the scale fetches nothing else
    assert documented_download_bytes(scaled) == SHIPPED_BYTES
    taesdxl = default_source(tmp_path, decoder=parse_decoder("tiny", "madebyollin/taesdxl"))
    assert documented_download_bytes(taesdxl) == SHIPPED_BYTES


@pytest.mark.parametrize(
    "change",
    [
        {"model_id": SD_REPO},
        {"variant": None},  # fp32: twice the bytes, not documented
        {"revision": "refs/pr/1"},
        {"adapters": "org/style:style.safetensors"},
        {"decoder": parse_decoder("tiny", "org/another-tiny-decoder")},
        {"inpaint": parse_inpaint("diffusers/stable-diffusion-xl-1.0-inpainting-0.1", "main")},
    ],
)
def test_any_other_configuration_has_no_documented_size(tmp_path, change):
    assert documented_download_bytes(default_source(tmp_path, **change)) is None


def page_config() -> dict:
    html = Client().get("/ui/").content.decode()
    block = html.split('<script id="ui-config" type="application/json">', 1)[1]
    return json.loads(block.split("</script>", 1)[0])


def test_the_page_carries_the_figure_for_pulls_label(settings, monkeypatch, tmp_path):
    assert settings.MODEL_ID == DEFAULT_MODEL_ID and settings.MODEL_VARIANT == "fp16"
    assert page_config()["pullBytes"] == SHIPPED_BYTES
    other = ModelLoader(default_source(tmp_path, model_id=SD_REPO), "cpu")
    monkeypatch.setattr(backend.current_backend(), "loader", other)
    assert page_config()["pullBytes"] is None  # the page: "the size shows once it starts"
