"""Which files of a real-world repo layout the pull fetches (no network: the listing is data)."""

from imagegen.model.components import pipeline_components
from imagegen.model.hub import select_files, weight_variant
from imagegen.model.share import ModelFile

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


def test_sdxl_base_fp16_selection_is_exactly_what_the_pipeline_loads():
    components = list(pipeline_components(SDXL_INDEX))
    chosen = {f.path for f in select_files(listing(SDXL_BASE), components, "fp16")}
    assert chosen == {
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


def test_without_a_variant_the_default_safetensors_are_chosen():
    chosen = {f.path for f in select_files(listing(SDXL_BASE), ["unet", "vae"], None)}
    assert chosen == {
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
    ]
    chosen = {f.path for f in select_files(listing(names), ["unet"], "fp16")}
    assert chosen == {
        "model_index.json",
        "unet/config.json",
        "unet/diffusion_pytorch_model.fp16-00001-of-00002.safetensors",
        "unet/diffusion_pytorch_model.fp16-00002-of-00002.safetensors",
        "unet/diffusion_pytorch_model.safetensors.index.fp16.json",
    }


def test_a_component_missing_the_variant_falls_back_to_its_default_weights():
    names = ["model_index.json", "vae/config.json", "vae/diffusion_pytorch_model.safetensors"]
    chosen = {f.path for f in select_files(listing(names), ["vae"], "fp16")}
    assert "vae/diffusion_pytorch_model.safetensors" in chosen


def test_weight_variant_names():
    assert weight_variant("model.fp16.safetensors") == "fp16"
    assert weight_variant("diffusion_pytorch_model.fp16-00001-of-00003.safetensors") == "fp16"
    assert weight_variant("diffusion_pytorch_model.safetensors") is None
    assert weight_variant("model-00001-of-00002.safetensors") is None
