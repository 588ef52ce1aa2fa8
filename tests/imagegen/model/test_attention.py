"""Attention slicing with the fused kernel: the same numbers as diffusers' own sliced and
unsliced processors, memory bounded without building the score matrix, and with a mask slices
of the size diffusers chose."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from diffusers.models.attention_processor import (
    Attention,
    AttnProcessor2_0,
    SlicedAttnProcessor,
)

from imagegen.model.attention import SlicedSdpaProcessor, use_fused_kernel_in_slices
from imagegen.model.pipeline import load_pipeline
from tests.support.model_service import SD_REPO


def _attention(**kwargs) -> Attention:
    torch.manual_seed(0)
    return Attention(**kwargs).eval()


@pytest.mark.parametrize(
    "kwargs, inputs",
    [
        # UNet self-attention on image tokens (batch 2: the guided pair).
        ({"query_dim": 32, "heads": 4, "dim_head": 8}, {"hidden_states": (2, 64, 32)}),
        # UNet cross-attention on 77 prompt tokens of another width.
        (
            {"query_dim": 32, "cross_attention_dim": 24, "heads": 4, "dim_head": 8},
            {"hidden_states": (2, 64, 32), "encoder_hidden_states": (2, 77, 24)},
        ),
        # VAE mid-block attention: 4-d input, group norm, residual, one head.
        (
            {"query_dim": 32, "heads": 1, "dim_head": 32, "norm_num_groups": 8,
             "residual_connection": True, "rescale_output_factor": 1.0, "bias": True},
            {"hidden_states": (2, 32, 8, 8)},
        ),
    ],
)  # fmt: skip
@pytest.mark.parametrize("slice_size", [1, 3, 4, 64])
def test_slices_give_the_same_result_as_diffusers_processors(kwargs, inputs, slice_size):
    attn = _attention(**kwargs)
    generator = torch.Generator().manual_seed(1)
    args = {k: torch.randn(shape, generator=generator) for k, shape in inputs.items()}
    results = {}
    for processor in (AttnProcessor2_0(), SlicedAttnProcessor(slice_size),
                      SlicedSdpaProcessor(slice_size, one_call_bytes=0)):  # fmt: skip
        attn.set_processor(processor)
        with torch.inference_mode():
            results[type(processor).__name__] = attn(**args)
    ours = results.pop("SlicedSdpaProcessor")
    for name, theirs in results.items():
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5, msg=name)


def test_an_attention_mask_is_sliced_with_its_rows():
    attn = _attention(query_dim=16, cross_attention_dim=16, heads=2, dim_head=8)
    generator = torch.Generator().manual_seed(2)
    hidden = torch.randn(3, 10, 16, generator=generator)
    context = torch.randn(3, 6, 16, generator=generator)
    keep = torch.ones(3, 6)
    keep[0, 4:] = 0  # each batch row attends to a different number of tokens
    keep[2, 1:] = 0
    mask = ((1 - keep) * -10000.0).unsqueeze(1)  # as UNet2DConditionModel passes it
    results = []
    sliced = [SlicedSdpaProcessor(size, one_call_bytes=0) for size in (1, 4)]
    for processor in (SlicedAttnProcessor(1), *sliced, SlicedSdpaProcessor(1)):
        attn.set_processor(processor)
        with torch.inference_mode():
            results.append(attn(hidden, encoder_hidden_states=context, attention_mask=mask))
    for result in results[1:]:
        torch.testing.assert_close(result, results[0], rtol=1e-5, atol=1e-5)
    with torch.inference_mode():
        unmasked = attn(hidden, encoder_hidden_states=context)
    assert not torch.allclose(unmasked[0], results[0][0], atol=1e-3)  # the mask mattered
    torch.testing.assert_close(unmasked[1], results[0][1])  # where it kept every token


def _fused_calls(
    processor: SlicedSdpaProcessor, tokens: int, monkeypatch, *, masked: bool = False
) -> list[int]:
    """The rows of each fused-kernel call for one guided SD 1.5 self-attention of `tokens`."""
    attn = _attention(query_dim=40, heads=8, dim_head=5)  # 16 rows, as SD 1.5's guided pair
    attn.set_processor(processor)
    rows: list[int] = []
    real = torch.nn.functional.scaled_dot_product_attention

    def counted(q, *args, **kwargs):
        rows.append(q.shape[0] * q.shape[1])
        return real(q, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counted)
    mask = torch.zeros(2, 1, tokens) if masked else None
    with torch.inference_mode():
        attn(torch.zeros(2, tokens, 40), attention_mask=mask)
    return rows


def test_without_a_mask_all_rows_go_in_one_call_at_every_size(monkeypatch):
    """SD 1.5 at 256x256 (1,024 image tokens) and at 512x512 (4,096: 1 GiB of scores)."""
    assert _fused_calls(SlicedSdpaProcessor(4), 32 * 32, monkeypatch) == [16]
    assert _fused_calls(SlicedSdpaProcessor(4), 64 * 64, monkeypatch) == [16]


def test_with_a_mask_large_attention_is_sliced(monkeypatch):
    assert _fused_calls(SlicedSdpaProcessor(4), 32 * 32, monkeypatch, masked=True) == [16]
    assert _fused_calls(SlicedSdpaProcessor(4), 64 * 64, monkeypatch, masked=True) == [4] * 4


def test_without_a_mask_the_result_is_plain_diffusers_bit_for_bit():
    attn = _attention(query_dim=32, heads=4, dim_head=8)
    hidden = torch.randn(2, 256, 32, generator=torch.Generator().manual_seed(3))
    results = []
    for processor in (AttnProcessor2_0(), SlicedSdpaProcessor(4)):
        attn.set_processor(processor)
        with torch.inference_mode():
            results.append(attn(hidden))
    assert torch.equal(results[0], results[1])


def _peak_growth(run) -> int:
    """Bytes the process's peak RSS rose above its RSS while `run` ran (Linux: VmHWM reset by
    clear_refs)."""

    def status(field: str) -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        raise AssertionError(field)

    Path("/proc/self/clear_refs").write_text("5")
    before = status("VmRSS")
    run()
    return status("VmHWM") - before


def peak_growths() -> None:
    """Prints the peak growth of one attention call through ours, then diffusers' slices.

    Run in a fresh process: freed memory an earlier test left in the allocator would hide it."""
    attn = _attention(query_dim=320, heads=8, dim_head=40)
    hidden = torch.randn(2, 64 * 64, 320)

    def run(processor):
        attn.set_processor(processor)
        with torch.inference_mode():
            attn(hidden)

    run(SlicedSdpaProcessor(4))  # warm: torch's buffers and threads
    ours = _peak_growth(lambda: run(SlicedSdpaProcessor(4)))
    theirs = _peak_growth(lambda: run(SlicedAttnProcessor(4)))
    print(json.dumps({"ours": ours, "theirs": theirs}))


def test_one_call_keeps_memory_bounded_without_the_score_matrix():
    """SD 1.5's top self-attention at 512x512, guided: its scores would be 1 GiB. diffusers'
    slices of 4 rows build 256 MiB of them at a time; the fused call none."""
    child = subprocess.run(
        [sys.executable, "-c", f"from {__name__} import peak_growths; peak_growths()"],
        capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    growth = json.loads(child.stdout.splitlines()[-1])
    assert growth["theirs"] > 384 * 2**20  # the measure sees a slice's score matrix and softmax
    assert growth["ours"] < 128 * 2**20, growth  # its own q, k, v and output: 40 MiB


def test_the_slice_sizes_diffusers_chose_are_kept(hub_root):
    pipe = load_pipeline(hub_root / SD_REPO, variant="fp16", device="cpu")
    sizes = {name: p.slice_size for name, p in pipe.unet.attn_processors.items()}
    assert sizes and all(isinstance(p, SlicedSdpaProcessor)
                         for p in pipe.unet.attn_processors.values())  # fmt: skip
    pipe.enable_attention_slicing()  # back to diffusers' processors, same rule
    assert {name: p.slice_size for name, p in pipe.unet.attn_processors.items()} == sizes
    assert use_fused_kernel_in_slices(pipe.unet) == len(sizes)


def test_images_match_diffusers_sliced_attention(hub_root):
    pipe = load_pipeline(hub_root / SD_REPO, variant="fp16", device="cpu")
    call = {"prompt": "a red fox", "num_inference_steps": 2, "output_type": "np"}
    ours = pipe(**call, generator=torch.Generator().manual_seed(5)).images
    pipe.enable_attention_slicing()  # diffusers' SlicedAttnProcessor everywhere
    theirs = pipe(**call, generator=torch.Generator().manual_seed(5)).images
    assert abs(ours - theirs).max() < 1e-4
