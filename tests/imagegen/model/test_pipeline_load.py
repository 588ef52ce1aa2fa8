"""How the pipeline is built: fp32, on the CPU, slicing and tiling on, and no offload helper."""

import pytest
import torch
from diffusers import DiffusionPipeline

from imagegen.model.pipeline import LoadOptions, load_pipeline
from tests.support.model_service import SD_REPO


def test_loads_fp32_on_cpu_with_slicing_and_tiling_and_never_offloads(hub_root, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("offload helper called on a CPU host")

    monkeypatch.setattr(DiffusionPipeline, "enable_model_cpu_offload", refuse)
    monkeypatch.setattr(DiffusionPipeline, "enable_sequential_cpu_offload", refuse)

    pipe = load_pipeline(hub_root / SD_REPO, variant="fp16", device="cpu")
    for component in (pipe.unet, pipe.vae, pipe.text_encoder):
        parameter = next(component.parameters())
        assert parameter.dtype == torch.float32  # fp16 files upcast on load
        assert parameter.device.type == "cpu"
    assert pipe.vae.use_slicing and pipe.vae.use_tiling
    processors = {type(p).__name__ for p in pipe.unet.attn_processors.values()}
    assert processors == {"SlicedSdpaProcessor"}  # sliced, each slice by the fused kernel


def test_the_offload_helper_really_fails_on_a_cpu_host(hub_root):
    """Why the loader must never call it: the seed's error row, reproduced."""
    pipe = load_pipeline(hub_root / SD_REPO, variant="fp16", device="cpu")
    if torch.cuda.is_available():
        pytest.skip("this host has an accelerator")
    with pytest.raises(RuntimeError, match="accelerator"):
        pipe.enable_model_cpu_offload()


@pytest.mark.parametrize("repo", [SD_REPO, "testorg/tiny-sdxl"])
def test_the_streaming_loader_builds_exactly_what_diffusers_builds(hub_root, repo):
    streamed = load_pipeline(
        hub_root / repo, variant="fp16", device="cpu", options=LoadOptions(streaming=True)
    )
    plain = load_pipeline(
        hub_root / repo, variant="fp16", device="cpu", options=LoadOptions(streaming=False)
    )
    for name, component in plain.components.items():
        if not isinstance(component, torch.nn.Module):
            continue
        ours, theirs = getattr(streamed, name).state_dict(), component.state_dict()
        assert ours.keys() == theirs.keys(), name
        for key, tensor in theirs.items():
            assert ours[key].dtype == tensor.dtype and torch.equal(ours[key], tensor), key
    image = {"prompt": "x", "num_inference_steps": 2, "output_type": "np"}
    ours = streamed(**image, generator=torch.Generator().manual_seed(3)).images
    theirs = plain(**image, generator=torch.Generator().manual_seed(3)).images
    assert (ours == theirs).all()


def test_attention_slicing_can_be_turned_off_and_vae_slicing_stays(hub_root):
    pipe = load_pipeline(
        hub_root / SD_REPO,
        variant="fp16",
        device="cpu",
        options=LoadOptions(attention_slicing=False),
    )
    processors = {type(p).__name__ for p in pipe.unet.attn_processors.values()}
    assert processors == {"AttnProcessor2_0"}  # diffusers' default
    assert pipe.vae.use_slicing and pipe.vae.use_tiling
