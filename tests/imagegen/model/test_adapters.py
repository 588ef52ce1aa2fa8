"""LoRA adapters fused into the tiny pipeline's fp32 weights at load (real peft, real
diffusers): the fused UNet and text encoder compute what the unfused LoRA computes, no LoRA
layer is left, fusing in parts is exact, the UNet's share is fused before the other
components are loaded, and an adapter that does not fit the model stops the load naming it."""

from pathlib import Path

import pytest
import torch

from imagegen.model import adapters as lora
from imagegen.model import weights
from imagegen.model.adapters import (
    Adapter,
    AdapterError,
    fuse_adapters,
    layer_of,
    lora_layers,
    lora_parts,
)
from imagegen.model.hub import ModelSource
from imagegen.model.loader import ModelLoader
from imagegen.model.pipeline import LoadOptions, load_pipeline
from tests.support.model_service import SD_REPO, SDXL_REPO
from tests.support.tiny_adapters import (
    KOHYA_FILE,
    LORA_REPO,
    METADATA_FILE,
    PEFT_FILE,
    SDXL_FILE,
    UNKNOWN_FILE,
    build_adapter_repos,
)

TOLERANCE = 1e-5  # float32 rounding of (W + s.B.A).x against W.x + s.B.(A.x); outputs are O(1)


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


def outputs(pipe, inputs: dict) -> dict[str, torch.Tensor]:
    """The UNet's output on `inputs` and the text encoder's on a fixed prompt."""
    tokens = pipe.tokenizer(["a red fox in the forest"], padding="max_length", return_tensors="pt")
    with torch.no_grad():
        return {
            "unet": pipe.unet(**inputs).sample,
            "text_encoder": pipe.text_encoder(tokens.input_ids)[0],
        }


def assert_close(ours: dict, reference: dict) -> None:
    for name, tensor in reference.items():
        assert (ours[name] - tensor).abs().max() < TOLERANCE, name


def plain(hub_root: Path, repo: str = SD_REPO, **options):
    return load_pipeline(hub_root / repo, variant="fp16", device="cpu", **options)


def unfused(hub_root: Path, loras: Path, adapters: list[Adapter], repo: str = SD_REPO):
    """The reference: the plain pipeline with the same LoRA weights loaded by diffusers as
    separate peft layers, each active with its scale (nothing fused). The fp32 ones read
    from the file as the service reads them, the one with diffusers' metadata by diffusers
    itself (fp32 on disk) so that its metadata is read the way diffusers reads it."""
    pipe = plain(hub_root, repo)
    names = [f"reference_{i}" for i in range(len(adapters))]
    for name, adapter in zip(names, adapters, strict=True):
        if adapter.file == METADATA_FILE:
            pipe.load_lora_weights(loras, weight_name=adapter.file, adapter_name=name)
        else:
            state = dict(weights.read_safetensors(loras / adapter.file, torch.float32))
            pipe.load_lora_weights(state, adapter_name=name)
    pipe.set_adapters(names, [a.scale for a in adapters])
    assert lora_layers(pipe.unet) > 0 and lora_layers(pipe.text_encoder) > 0
    return pipe


def fused(hub_root: Path, loras: Path, adapters: list[Adapter], repo=SD_REPO, **options):
    return plain(hub_root, repo, adapters=[(a, loras / a.file) for a in adapters], **options)


@pytest.mark.parametrize(
    "file", [KOHYA_FILE, PEFT_FILE, METADATA_FILE], ids=["kohya", "peft", "diffusers-metadata"]
)
@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "diffusers-loader"])
def test_the_fused_model_computes_what_the_unfused_lora_computes(hub_root, loras, file, streaming):
    adapters = [Adapter(LORA_REPO, file, scale=0.8)]
    base = plain(hub_root)
    inputs = unet_inputs(base)
    reference = outputs(unfused(hub_root, loras, adapters), inputs)
    ours = fused(hub_root, loras, adapters, options=LoadOptions(streaming=streaming))
    for name, tensor in outputs(base, inputs).items():
        assert (reference[name] - tensor).abs().max() > 0.05, name  # the LoRA does change it
    assert_close(outputs(ours, inputs), reference)


def test_two_adapters_are_fused_each_with_its_own_scale(hub_root, loras):
    adapters = [Adapter(LORA_REPO, KOHYA_FILE, 0.5), Adapter(LORA_REPO, PEFT_FILE, 1.5)]
    ours = fused(hub_root, loras, adapters)
    inputs = unet_inputs(ours)
    assert_close(outputs(ours, inputs), outputs(unfused(hub_root, loras, adapters), inputs))


def test_fusing_in_parts_of_a_few_layers_is_exact(hub_root, loras):
    adapter = Adapter(LORA_REPO, KOHYA_FILE, 1.0)
    parts = list(lora_parts(loras / KOHYA_FILE, unet=True, chunk_bytes=4096))
    assert len(parts) > 10
    for part in parts:  # whole layers: each layer's tensors in one part
        layers = {layer_of(name) for name in part}
        assert all(f"{layer}.lora_down.weight" in part for layer in layers)
        assert all(f"{layer}.lora_up.weight" in part for layer in layers)
    in_parts = plain(hub_root)
    fuse_adapters(in_parts, [(adapter, loras / KOHYA_FILE)], chunk_bytes=4096)
    whole = plain(hub_root)
    fuse_adapters(whole, [(adapter, loras / KOHYA_FILE)], chunk_bytes=float("inf"))
    inputs = unet_inputs(whole)
    assert_close(outputs(in_parts, inputs), outputs(whole, inputs))
    assert_close(outputs(in_parts, inputs), outputs(unfused(hub_root, loras, [adapter]), inputs))


def test_no_lora_layer_is_left_and_the_weights_keep_their_names_shapes_and_dtype(hub_root, loras):
    """What makes a step cost what it cost without the adapter: the same modules, the same
    fp32 tensors; only their values differ."""
    before = plain(hub_root)
    after = fused(hub_root, loras, [Adapter(LORA_REPO, KOHYA_FILE, 1.0)])
    assert lora_layers(after) == 0
    for name in ("unet", "text_encoder", "vae"):
        theirs, mine = getattr(before, name), getattr(after, name)
        assert [type(m) for m in mine.modules()] == [type(m) for m in theirs.modules()], name
        old, new = theirs.state_dict(), mine.state_dict()
        assert new.keys() == old.keys(), name
        for key, tensor in old.items():
            assert (new[key].shape, new[key].dtype) == (tensor.shape, tensor.dtype), key
    fused_weights = after.unet.state_dict()
    changed = [
        k for k, v in before.unet.state_dict().items() if not torch.equal(v, fused_weights[k])
    ]
    assert any(".to_q." in k for k in changed) and any(".conv1." in k for k in changed)


def test_the_unet_is_fused_before_the_other_components_are_loaded(hub_root, loras, monkeypatch):
    """So the fuse adds nothing to the load's peak memory (bench/adapter_bench.py)."""
    events = []
    load_component = weights.load_component

    def recording(path, name, *args, **kwargs):
        events.append(f"load {name}")
        return load_component(path, name, *args, **kwargs)

    unet_layers = []
    fuse = lora.fuse_into_unet

    def fusing(*args, **kwargs):
        events.append("fuse unet")
        fuse(*args, **kwargs)
        unet_layers.append(lora_layers(args[1]))

    monkeypatch.setattr(weights, "load_component", recording)
    monkeypatch.setattr(lora, "fuse_into_unet", fusing)
    fused(hub_root, loras, [Adapter(LORA_REPO, KOHYA_FILE, 1.0)])
    assert events == ["load unet", "fuse unet", "load text_encoder", "load vae"]
    assert unet_layers == [0]


def test_an_adapter_for_another_model_stops_the_load_naming_it(hub_root, loras):
    sdxl_lora = Adapter(LORA_REPO, SDXL_FILE, 1.0)  # the tiny SDXL UNet's shapes
    with pytest.raises(AdapterError, match=f"MODEL_ADAPTERS {LORA_REPO}:{SDXL_FILE}: "):
        fused(hub_root, loras, [sdxl_lora])


def test_a_file_in_no_lora_layout_stops_the_load_naming_it(hub_root, loras):
    with pytest.raises(
        AdapterError,
        match=f"MODEL_ADAPTERS {LORA_REPO}:{UNKNOWN_FILE}: {UNKNOWN_FILE}: 'model.layer.weight' "
        "is in no LoRA layout known here",
    ):
        fused(hub_root, loras, [Adapter(LORA_REPO, UNKNOWN_FILE, 1.0)])


def test_an_adapter_fuses_into_sdxl_and_both_its_text_encoders(hub_root, loras):
    adapter = Adapter(LORA_REPO, SDXL_FILE, 0.7)
    pipe = fused(hub_root, loras, [adapter], repo=SDXL_REPO)
    assert lora_layers(pipe) == 0
    reference = unfused(hub_root, loras, [adapter], repo=SDXL_REPO)
    assert lora_layers(reference.text_encoder_2) > 0
    generator = torch.Generator().manual_seed(0)
    inputs = unet_inputs(pipe) | {
        "added_cond_kwargs": {
            "text_embeds": torch.randn(2, 32, generator=generator),
            "time_ids": torch.randn(2, 6, generator=generator),
        }
    }
    tokens = pipe.tokenizer_2(["a red fox"], padding="max_length", return_tensors="pt").input_ids
    with torch.no_grad():
        ours = [pipe.unet(**inputs).sample, pipe.text_encoder_2(tokens)[0]]
        theirs = [reference.unet(**inputs).sample, reference.text_encoder_2(tokens)[0]]
    for mine, expected in zip(ours, theirs, strict=True):
        assert (mine - expected).abs().max() < TOLERANCE


def test_the_status_lists_the_adapters_in_the_order_they_are_fused(tmp_path):
    adapters = (
        Adapter("org/lcm", "a.safetensors", 1.0),
        Adapter("org/hyper", "b.safetensors", 0.125),
    )
    source = ModelSource(
        model_id=SD_REPO, revision="main", variant="fp16", model_dir=tmp_path / "share",
        cache_dir=tmp_path / "cache", adapters=adapters,
    )  # fmt: skip
    status = ModelLoader(source, "cpu").status()
    assert [a.model_dump() for a in status.adapters] == [
        {"repo": "org/lcm", "file": "a.safetensors", "scale": 1.0},
        {"repo": "org/hyper", "file": "b.safetensors", "scale": 0.125},
    ]
    assert status.decoder.model_dump() == {"kind": "full", "repo": None}
