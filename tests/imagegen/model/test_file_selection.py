"""Which files of a real-world repo layout the pull fetches: the listing is data, and one test
compares the choice with what diffusers' own download fetches from a local hub."""

import json
import os
import subprocess
import sys

import pytest

from imagegen.model.hub import MODEL_INDEX, wanted_files
from imagegen.model.share import ModelFile
from imagegen.model.weights import weight_variant
from tests.support.local_hub import LocalHub
from tests.support.processes import ROOT

# The file list of the SDXL base repository, as the hub lists it.
SDXL_BASE = [
    ".gitattributes",
    "01.png",
    "LICENSE.md",
    "README.md",
    "comparison.png",
    "model_index.json",
    "pipeline.png",
    "sd_xl_base_1.0.safetensors",
    "sd_xl_base_1.0_0.9vae.safetensors",
    "sd_xl_offset_example-lora_1.0.safetensors",
    "scheduler/scheduler_config.json",
    "text_encoder/config.json",
    "text_encoder/flax_model.msgpack",
    "text_encoder/model.fp16.safetensors",
    "text_encoder/model.onnx",
    "text_encoder/model.safetensors",
    "text_encoder/openvino_model.bin",
    "text_encoder/openvino_model.xml",
    "text_encoder/pytorch_model.fp16.bin",
    "text_encoder/pytorch_model.bin",
    "text_encoder_2/config.json",
    "text_encoder_2/flax_model.msgpack",
    "text_encoder_2/model.fp16.safetensors",
    "text_encoder_2/model.onnx",
    "text_encoder_2/model.onnx_data",
    "text_encoder_2/model.safetensors",
    "text_encoder_2/openvino_model.bin",
    "text_encoder_2/openvino_model.xml",
    "text_encoder_2/pytorch_model.fp16.bin",
    "text_encoder_2/pytorch_model.bin",
    "tokenizer/merges.txt",
    "tokenizer/special_tokens_map.json",
    "tokenizer/tokenizer_config.json",
    "tokenizer/vocab.json",
    "tokenizer_2/merges.txt",
    "tokenizer_2/special_tokens_map.json",
    "tokenizer_2/tokenizer_config.json",
    "tokenizer_2/vocab.json",
    "unet/config.json",
    "unet/diffusion_flax_model.msgpack",
    "unet/diffusion_pytorch_model.bin",
    "unet/diffusion_pytorch_model.fp16.bin",
    "unet/diffusion_pytorch_model.fp16.safetensors",
    "unet/diffusion_pytorch_model.safetensors",
    "unet/model.onnx",
    "unet/model.onnx_data",
    "unet/openvino_model.bin",
    "unet/openvino_model.xml",
    "vae/config.json",
    "vae/diffusion_flax_model.msgpack",
    "vae/diffusion_pytorch_model.bin",
    "vae/diffusion_pytorch_model.fp16.bin",
    "vae/diffusion_pytorch_model.fp16.safetensors",
    "vae/diffusion_pytorch_model.safetensors",
    "vae_1_0/config.json",
    "vae_1_0/diffusion_pytorch_model.fp16.safetensors",
    "vae_1_0/diffusion_pytorch_model.safetensors",
    "vae_decoder/config.json",
    "vae_decoder/model.onnx",
    "vae_encoder/config.json",
    "vae_encoder/model.onnx",
]

SDXL_INDEX = {
    "_class_name": "StableDiffusionXLPipeline",
    "scheduler": ["diffusers", "EulerDiscreteScheduler"],
    "text_encoder": ["transformers", "CLIPTextModel"],
    "text_encoder_2": ["transformers", "CLIPTextModelWithProjection"],
    "tokenizer": ["transformers", "CLIPTokenizer"],
    "tokenizer_2": ["transformers", "CLIPTokenizer"],
    "unet": ["diffusers", "UNet2DConditionModel"],
    "vae": ["diffusers", "AutoencoderKL"],
    "image_encoder": [None, None],
    "force_zeros_for_empty_prompt": True,
}


def listing(names: list[str]) -> list[ModelFile]:
    return [ModelFile(path=name, size=1) for name in names]


def chosen(names: list[str], model_index: dict, variant: str | None) -> set[str]:
    return {f.path for f in wanted_files(listing(names), model_index, variant)}


UNET_VAE = {"unet": ["diffusers", "UNet2DConditionModel"], "vae": ["diffusers", "AutoencoderKL"]}

SDXL_FP16 = {
    "model_index.json",
    "scheduler/scheduler_config.json",
    "text_encoder/config.json",
    "text_encoder/model.fp16.safetensors",
    "text_encoder_2/config.json",
    "text_encoder_2/model.fp16.safetensors",
    "tokenizer/merges.txt",
    "tokenizer/special_tokens_map.json",
    "tokenizer/tokenizer_config.json",
    "tokenizer/vocab.json",
    "tokenizer_2/merges.txt",
    "tokenizer_2/special_tokens_map.json",
    "tokenizer_2/tokenizer_config.json",
    "tokenizer_2/vocab.json",
    "unet/config.json",
    "unet/diffusion_pytorch_model.fp16.safetensors",
    "vae/config.json",
    "vae/diffusion_pytorch_model.fp16.safetensors",
}


def test_sdxl_base_fp16_selection_is_exactly_what_the_pipeline_loads():
    assert chosen(SDXL_BASE, SDXL_INDEX, "fp16") == SDXL_FP16


def test_diffusers_own_download_of_sdxl_base_fetches_the_same_files_and_vae_1_0(tmp_path):
    """DiffusionPipeline.download itself, from a local hub serving SDXL base's listing (each
    file a few bytes): the service fetches what diffusers fetches, less the fp16 weights of
    `vae_1_0`, a folder model_index.json does not name (diffusers takes variant weights from
    every folder; the pipeline never reads that one)."""
    repo = tmp_path / "hub" / "stabilityai" / "sdxl-base"
    for name in SDXL_BASE:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(name)
    index = {"_class_name": "StableDiffusionXLPipeline", "_diffusers_version": "0.42.1"}
    (repo / MODEL_INDEX).write_text(json.dumps(index | SDXL_INDEX))
    with LocalHub(tmp_path / "hub") as hub:
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf-home"),
               "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}  # fmt: skip
        download = (
            "from diffusers import DiffusionPipeline; DiffusionPipeline.download("
            "'stabilityai/sdxl-base', variant='fp16', use_safetensors=True)"
        )
        run = subprocess.run([sys.executable, "-c", download], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        assert run.returncode == 0, run.stderr
        fetched = {p.split("/resolve/", 1)[1].split("/", 1)[1] for p in hub.file_gets()}
    assert fetched == SDXL_FP16 | {"vae_1_0/diffusion_pytorch_model.fp16.safetensors"}


def test_without_a_variant_the_default_safetensors_are_chosen():
    assert chosen(SDXL_BASE, UNET_VAE, None) == {
        "model_index.json",
        "unet/config.json",
        "unet/diffusion_pytorch_model.safetensors",
        "vae/config.json",
        "vae/diffusion_pytorch_model.safetensors",
    }


def test_sharded_variant_weights_come_with_their_index():
    names = [
        "model_index.json",
        "unet/config.json",
        "unet/diffusion_pytorch_model.fp16-00001-of-00002.safetensors",
        "unet/diffusion_pytorch_model.fp16-00002-of-00002.safetensors",
        "unet/diffusion_pytorch_model.safetensors.index.fp16.json",
        "unet/diffusion_pytorch_model-00001-of-00002.safetensors",
        "unet/diffusion_pytorch_model-00002-of-00002.safetensors",
        "unet/diffusion_pytorch_model.safetensors.index.json",
        "unet/diffusion_pytorch_model.bin.index.fp16.json",
    ]
    assert chosen(names, {"unet": UNET_VAE["unet"]}, "fp16") == {
        "model_index.json",
        "unet/config.json",
        "unet/diffusion_pytorch_model.fp16-00001-of-00002.safetensors",
        "unet/diffusion_pytorch_model.fp16-00002-of-00002.safetensors",
        "unet/diffusion_pytorch_model.safetensors.index.fp16.json",
    }


def test_a_component_missing_the_variant_falls_back_to_its_default_weights():
    names = [
        "model_index.json",
        "unet/config.json",
        "unet/diffusion_pytorch_model.fp16.safetensors",
        "unet/diffusion_pytorch_model.safetensors",
        "vae/config.json",
        "vae/diffusion_pytorch_model-00001-of-00002.safetensors",
        "vae/diffusion_pytorch_model-00002-of-00002.safetensors",
        "vae/diffusion_pytorch_model.safetensors.index.json",
    ]
    assert chosen(names, UNET_VAE, "fp16") == {
        "model_index.json",
        "unet/config.json",
        "unet/diffusion_pytorch_model.fp16.safetensors",
        "vae/config.json",
        "vae/diffusion_pytorch_model-00001-of-00002.safetensors",
        "vae/diffusion_pytorch_model-00002-of-00002.safetensors",
        "vae/diffusion_pytorch_model.safetensors.index.json",
    }


def test_a_repo_without_the_variant_gets_its_default_weights():
    names = ["model_index.json", "vae/config.json", "vae/diffusion_pytorch_model.safetensors"]
    assert chosen(names, {"vae": UNET_VAE["vae"]}, "fp16") == set(names)


def test_a_component_without_safetensors_weights_is_refused():
    names = ["model_index.json", "unet/config.json", "unet/diffusion_pytorch_model.bin"]
    with pytest.raises(OSError, match="safetensors"):
        wanted_files(listing(names), {"unet": UNET_VAE["unet"]}, "fp16")


def test_never_root_checkpoints_pickles_or_openvino_even_where_diffusers_would_fetch_them():
    """diffusers fetches a folder without safetensors weights whole (`tokenizer/*`), and
    weights at the repo root of a flat, transformers-style layout."""
    names = [
        "model_index.json",
        "diffusion_pytorch_model.fp16.safetensors",
        "model.fp16.safetensors",
        "tokenizer/vocab.json",
        "tokenizer/legacy.ckpt",
        "tokenizer/state.pt",
        "tokenizer/state.pth",
        "tokenizer/openvino_model.xml",
        "unet/config.json",
        "unet/diffusion_pytorch_model.fp16.safetensors",
    ]
    index = {"tokenizer": ["transformers", "CLIPTokenizer"], "unet": UNET_VAE["unet"]}
    assert chosen(names, index, "fp16") == {
        "model_index.json",
        "tokenizer/vocab.json",
        "unet/config.json",
        "unet/diffusion_pytorch_model.fp16.safetensors",
    }


def test_files_model_index_tells_diffusers_to_ignore_are_not_fetched():
    names = ["model_index.json", "tokenizer/vocab.json", "tokenizer/notes.json",
             "unet/config.json", "unet/diffusion_pytorch_model.safetensors"]  # fmt: skip
    index = {"tokenizer": ["transformers", "CLIPTokenizer"], "unet": UNET_VAE["unet"],
             "_ignore_files": ["tokenizer/notes.json"]}  # fmt: skip
    assert chosen(names, index, None) == set(names) - {"tokenizer/notes.json"}


def test_weight_variant_names():
    assert weight_variant("model.fp16.safetensors") == "fp16"
    assert weight_variant("diffusion_pytorch_model.fp16-00001-of-00003.safetensors") == "fp16"
    assert weight_variant("diffusion_pytorch_model.safetensors") is None
    assert weight_variant("model-00001-of-00002.safetensors") is None
