"""VAE_DECODER=tiny on the tiny pipeline, in this process: the tiny autoencoder replaces the
pipeline's VAE, in fp32 with slicing and tiling, and the image has the asked size; which
repo is the default follows the pipeline's type."""

import shutil
from pathlib import Path

import pytest
import torch
from diffusers import AutoencoderKL, AutoencoderTiny
from safetensors.torch import load_file

from imagegen.model.decoder import TAESD, TAESDXL, DecoderChoice, is_sdxl
from imagegen.model.pipeline import load_pipeline
from tests.support.model_service import SD_REPO, SDXL_REPO
from tests.support.tiny_adapters import TAESD_REPO, build_adapter_repos


@pytest.fixture
def decoders(hub_root: Path) -> Path:
    build_adapter_repos(hub_root, sd_repo=SD_REPO, sdxl_repo=SDXL_REPO)
    return hub_root


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "diffusers-loader"])
def test_the_tiny_decoder_is_the_pipelines_vae_in_fp32_with_slicing_and_tiling(decoders, streaming):
    from imagegen.model.pipeline import LoadOptions

    folder = decoders / TAESD_REPO
    pipe = load_pipeline(
        decoders / SD_REPO,
        variant="fp16",
        device="cpu",
        options=LoadOptions(streaming=streaming),
        tiny_decoder=folder,
    )
    assert isinstance(pipe.vae, AutoencoderTiny)
    assert pipe.vae.use_slicing and pipe.vae.use_tiling
    on_disk = load_file(folder / "diffusion_pytorch_model.safetensors")
    loaded = pipe.vae.state_dict()
    assert loaded.keys() == on_disk.keys()
    for key, tensor in on_disk.items():
        assert loaded[key].dtype == torch.float32 and torch.equal(loaded[key], tensor.float())


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "diffusers-loader"])
def test_with_the_tiny_decoder_the_full_vae_is_never_read(decoders, tmp_path, streaming):
    from imagegen.model.pipeline import LoadOptions

    repo = shutil.copytree(decoders / SD_REPO, tmp_path / "repo")
    (repo / "vae" / "diffusion_pytorch_model.fp16.safetensors").write_bytes(b"not weights")
    options = LoadOptions(streaming=streaming)
    pipe = load_pipeline(
        repo, variant="fp16", device="cpu", options=options, tiny_decoder=decoders / TAESD_REPO
    )
    assert isinstance(pipe.vae, AutoencoderTiny)
    with pytest.raises(Exception):  # noqa: B017 - whichever error the loader gives
        load_pipeline(repo, variant="fp16", device="cpu", options=options)


def test_an_image_decoded_by_the_tiny_decoder_has_the_asked_size(decoders):
    tiny = load_pipeline(
        decoders / SD_REPO, variant="fp16", device="cpu", tiny_decoder=decoders / TAESD_REPO
    )
    full = load_pipeline(decoders / SD_REPO, variant="fp16", device="cpu")
    assert isinstance(full.vae, AutoencoderKL)
    call = {"prompt": "a red fox", "num_inference_steps": 2, "width": 96, "height": 64}
    image = tiny(**call, generator=torch.Generator().manual_seed(1)).images[0]
    other = full(**call, generator=torch.Generator().manual_seed(1)).images[0]
    assert image.size == other.size == (96, 64)
    assert image.tobytes() != other.tobytes()  # a different decoder made it


@pytest.mark.parametrize(
    ("class_name", "expected"),
    [
        ("StableDiffusionXLPipeline", TAESDXL),
        ("StableDiffusionXLImg2ImgPipeline", TAESDXL),
        ("StableDiffusionPipeline", TAESD),
        ("AnythingElse", TAESD),
    ],
)
def test_the_default_tiny_decoder_follows_the_pipeline_type(class_name, expected):
    index = {"_class_name": class_name}
    assert DecoderChoice("tiny").tiny_repo(index) == expected
    assert is_sdxl(index) is (expected == TAESDXL)


def test_vae_decoder_repo_overrides_the_default_and_full_has_no_repo():
    sdxl = {"_class_name": "StableDiffusionXLPipeline"}
    assert DecoderChoice("tiny", "org/my-taesd").tiny_repo(sdxl) == "org/my-taesd"
    assert DecoderChoice("tiny").tiny_repo(None) is None  # not known before the pull
    assert DecoderChoice("full", "org/my-taesd").tiny_repo(sdxl) is None
