"""How the pipeline is built: fp32, on the CPU, slicing and tiling on, and no offload helper."""

import pytest
import torch
from diffusers import DiffusionPipeline

from imagegen.pipeline import load_pipeline
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
    assert processors == {"SlicedAttnProcessor"}


def test_the_offload_helper_really_fails_on_a_cpu_host(hub_root):
    """Why the loader must never call it: the seed's error row, reproduced."""
    pipe = load_pipeline(hub_root / SD_REPO, variant="fp16", device="cpu")
    if torch.cuda.is_available():
        pytest.skip("this host has an accelerator")
    with pytest.raises(RuntimeError, match="accelerator"):
        pipe.enable_model_cpu_offload()
