"""LoRA adapters fused into the tiny pipeline's fp32 weights at load (real peft, real
diffusers): the fused UNet computes what the unfused LoRA computes, no LoRA layer is left,
and an adapter that does not fit the model stops the load naming it."""

from pathlib import Path

import pytest
import torch

from imagegen.model.adapters import Adapter, AdapterError, lora_layers
from imagegen.model.pipeline import load_pipeline
from imagegen.model.weights import read_safetensors
from tests.support.model_service import SD_REPO, SDXL_REPO
from tests.support.tiny_adapters import (
    KOHYA_FILE,
    LORA_REPO,
    PEFT_FILE,
    SDXL_FILE,
    build_adapter_repos,
)

TOLERANCE = 1e-5  # float32 rounding of W + s.B.A against W.x + s.B.(A.x); outputs are O(1)


@pytest.fixture
def loras(hub_root: Path) -> Path:
    build_adapter_repos(hub_root, sd_repo=SD_REPO, sdxl_repo=SDXL_REPO)
    return hub_root / LORA_REPO


def unet_inputs(pipe, seed: int = 0) -> dict:
    generator = torch.Generator().manual_seed(seed)
    config = pipe.unet.config
    sample = torch.randn(2, config.in_channels, 16, 16, generator=generator)
    hidden = torch.randn(2, 77, config.cross_attention_dim, generator=generator)
    return {"sample": sample, "timestep": torch.tensor([500]), "encoder_hidden_states": hidden}


def unet_output(pipe, inputs: dict) -> torch.Tensor:
    with torch.no_grad():
        return pipe.unet(**inputs).sample


def unfused(hub_root: Path, loras: Path, adapters: list[Adapter]):
    """The reference: the plain pipeline with the same fp32 LoRA weights loaded by peft as
    separate layers, each active with its scale (nothing fused)."""
    pipe = load_pipeline(hub_root / SD_REPO, variant="fp16", device="cpu")
    names = [f"reference_{i}" for i in range(len(adapters))]
    for name, adapter in zip(names, adapters, strict=True):
        pipe.load_lora_weights(
            dict(read_safetensors(loras / adapter.file, torch.float32)), adapter_name=name
        )
    pipe.set_adapters(names, [a.scale for a in adapters])
    assert lora_layers(pipe) > 0
    return pipe


def fused(hub_root: Path, loras: Path, adapters: list[Adapter]):
    return load_pipeline(
        hub_root / SD_REPO,
        variant="fp16",
        device="cpu",
        adapters=[(a, loras / a.file) for a in adapters],
    )


@pytest.mark.parametrize("file", [KOHYA_FILE, PEFT_FILE], ids=["kohya-layout", "peft-layout"])
def test_the_fused_unet_computes_what_the_unfused_lora_computes(hub_root, loras, file):
    adapters = [Adapter(LORA_REPO, file, scale=0.8)]
    plain = load_pipeline(hub_root / SD_REPO, variant="fp16", device="cpu")
    ours = fused(hub_root, loras, adapters)
    reference = unfused(hub_root, loras, adapters)
    inputs = unet_inputs(plain)
    base, with_lora = unet_output(plain, inputs), unet_output(reference, inputs)
    result = unet_output(ours, inputs)

    assert (with_lora - base).abs().max() > 0.1  # the LoRA does change the output
    assert (result - with_lora).abs().max() < TOLERANCE


def test_two_adapters_are_fused_each_with_its_own_scale(hub_root, loras):
    adapters = [Adapter(LORA_REPO, KOHYA_FILE, 0.5), Adapter(LORA_REPO, PEFT_FILE, 1.5)]
    inputs = unet_inputs(fused(hub_root, loras, adapters[:1]))
    result = unet_output(fused(hub_root, loras, adapters), inputs)
    reference = unet_output(unfused(hub_root, loras, adapters), inputs)
    assert (result - reference).abs().max() < TOLERANCE


def test_no_lora_layer_is_left_and_the_weights_keep_their_names_shapes_and_dtype(hub_root, loras):
    """What makes a step cost what it cost without the adapter: the same modules, the same
    fp32 tensors; only their values differ."""
    plain = load_pipeline(hub_root / SD_REPO, variant="fp16", device="cpu")
    ours = fused(hub_root, loras, [Adapter(LORA_REPO, KOHYA_FILE, 1.0)])
    assert lora_layers(ours) == 0
    for name in ("unet", "text_encoder", "vae"):
        theirs, mine = getattr(plain, name), getattr(ours, name)
        assert [type(m) for m in mine.modules()] == [type(m) for m in theirs.modules()], name
        before, after = theirs.state_dict(), mine.state_dict()
        assert after.keys() == before.keys(), name
        for key, tensor in before.items():
            assert (after[key].shape, after[key].dtype) == (tensor.shape, tensor.dtype), key
    fused_weights = ours.unet.state_dict()
    changed = [
        k for k, v in plain.unet.state_dict().items() if not torch.equal(v, fused_weights[k])
    ]
    assert any(".to_q." in k for k in changed) and any(".conv1." in k for k in changed)


def test_an_adapter_for_another_model_stops_the_load_naming_it(hub_root, loras):
    sdxl_lora = Adapter(LORA_REPO, SDXL_FILE, 1.0)  # the tiny SDXL UNet's shapes
    with pytest.raises(AdapterError, match=f"MODEL_ADAPTERS {LORA_REPO}:{SDXL_FILE}: "):
        fused(hub_root, loras, [sdxl_lora])


def test_an_adapter_fuses_into_sdxl_too(hub_root, loras):
    adapter = Adapter(LORA_REPO, SDXL_FILE, 0.7)
    pipe = load_pipeline(
        hub_root / SDXL_REPO, variant="fp16", device="cpu", adapters=[(adapter, loras / SDXL_FILE)]
    )
    assert lora_layers(pipe) == 0
    reference = load_pipeline(hub_root / SDXL_REPO, variant="fp16", device="cpu")
    reference.load_lora_weights(dict(read_safetensors(loras / SDXL_FILE, torch.float32)), "r")
    reference.set_adapters(["r"], [0.7])
    generator = torch.Generator().manual_seed(0)
    inputs = unet_inputs(pipe) | {
        "added_cond_kwargs": {
            "text_embeds": torch.randn(2, 32, generator=generator),
            "time_ids": torch.randn(2, 6, generator=generator),
        }
    }
    difference = unet_output(pipe, inputs) - unet_output(reference, inputs)
    assert difference.abs().max() < TOLERANCE
