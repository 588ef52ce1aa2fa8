"""The streaming loader's safetensors reader against files the safetensors library wrote."""

import pytest
import torch
from safetensors.torch import save_file

from imagegen.model.weights import _chunks, _layout, load_component, read_header, read_safetensors


def test_reads_every_tensor_cast_like_diffusers(tmp_path):
    tensors = {
        "a.weight": torch.randn(3, 4).half(),
        "b.bias": torch.randn(5).to(torch.bfloat16),
        "c.ids": torch.arange(6, dtype=torch.int64),
        "d.mask": torch.tensor([True, False]),
        "e.empty": torch.zeros(0, 4).half(),
    }
    save_file(tensors, tmp_path / "w.safetensors")
    read = dict(read_safetensors(tmp_path / "w.safetensors", torch.float32))
    assert read.keys() == tensors.keys()
    for name, tensor in tensors.items():
        expected = tensor.float() if tensor.is_floating_point() else tensor
        assert read[name].dtype == expected.dtype and torch.equal(read[name], expected), name


@pytest.mark.parametrize("cut", [4, 20, -7])
def test_a_truncated_file_is_a_clear_error(tmp_path, cut):
    save_file({"a": torch.randn(64, 64)}, tmp_path / "w.safetensors")
    data = (tmp_path / "w.safetensors").read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(data[:cut])
    with pytest.raises((ValueError, EOFError)):
        list(read_safetensors(tmp_path / "cut.safetensors", torch.float32))


def test_a_component_whose_names_do_not_match_is_left_to_diffusers(tmp_path):
    from diffusers import AutoencoderKL

    vae = AutoencoderKL(block_out_channels=(8,), norm_num_groups=8, latent_channels=4)
    folder = tmp_path / "vae"
    vae.save_pretrained(folder, safe_serialization=True)
    weights = folder / "diffusion_pytorch_model.safetensors"
    from safetensors.torch import load_file

    renamed = {f"old.{key}": value for key, value in load_file(weights).items()}
    save_file(renamed, weights)
    assert (
        load_component(
            tmp_path, "vae", "diffusers", "AutoencoderKL", variant=None, dtype=torch.float32
        )
        is None
    )


@pytest.mark.parametrize("chunk_bytes", [1, 6, 64, 1000, 64 * 2**20])
def test_chunks_cut_anywhere_give_the_same_tensors_each_64_byte_aligned(
    tmp_path, monkeypatch, chunk_bytes
):
    """The block cast in chunks of any size (runs across tensors, tensors across chunks)."""
    monkeypatch.setattr("imagegen.model.weights.CHUNK_BYTES", chunk_bytes)
    generator = torch.Generator().manual_seed(0)
    tensors = {
        f"t{i:02d}": torch.randn(shape, generator=generator).to(dtype)
        for i, (shape, dtype) in enumerate([
            ((7, 5), torch.float16), ((33,), torch.float16), ((3,), torch.float32),
            ((2, 2), torch.float32), ((17, 3), torch.bfloat16), ((), torch.float16),
            ((64, 9), torch.float16),
        ])
    }  # fmt: skip
    # Adjacent in the file and, 16 elements each, in the block: one run to cast.
    tensors |= {f"u{i}": torch.randn(4, 4, generator=generator).half() for i in range(3)}
    tensors["ids"] = torch.arange(5, dtype=torch.int64)
    save_file(tensors, tmp_path / "w.safetensors")
    with open(tmp_path / "w.safetensors", "rb") as f:
        entries = read_header(f, tmp_path / "w.safetensors")
    chunks = _chunks(entries, _layout(entries, torch.float32)[0])
    if chunk_bytes >= 96:  # the three 32-byte u tensors fit one chunk
        assert len(chunks) < len([e for e in entries if e.stored.is_floating_point])
    read = dict(read_safetensors(tmp_path / "w.safetensors", torch.float32))
    assert read.keys() == tensors.keys()
    for name, tensor in tensors.items():
        expected = tensor.float() if tensor.is_floating_point() else tensor
        assert torch.equal(read[name], expected), name
        assert read[name].data_ptr() % 64 == 0, name  # as a tensor of its own would be
