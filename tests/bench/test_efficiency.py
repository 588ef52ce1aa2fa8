"""bench/efficiency.py: the FLOPs an image takes, counted on the meta device from a repo's
configs alone, are what the same models count running for real (so the full-size figures
need no weights), grow with the pixels, and the time-to-image bench divides them by its
measured peak stage by stage. On the tests' tiny SD and SDXL pipelines."""

from pathlib import Path

import pytest
import torch
from diffusers import AutoencoderKL, UNet2DConditionModel
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from bench.efficiency import Peak, Work, count_decode, count_work
from bench.time_to_image_bench import Run, efficiency_rows, peak_from_child
from imagegen.generation.work import TOKENS
from imagegen.model.pipeline import decode_in_tiles_of
from tests.support.model_service import SD_REPO, SDXL_REPO


def counted(run) -> float:
    with FlopCounterMode(display=False) as counter:
        run()
    return float(counter.get_total_flops())


@pytest.mark.parametrize("repo", [SD_REPO, SDXL_REPO])
def test_meta_counts_are_what_the_real_models_count_and_grow_with_the_pixels(hub_root, repo):
    path = Path(hub_root) / repo
    work = count_work(path, 64)
    unet = UNet2DConditionModel.from_pretrained(path / "unet")
    vae = AutoencoderKL.from_pretrained(path / "vae")
    scale = 2 ** (len(vae.config.block_out_channels) - 1)
    latent = torch.randn(1, unet.config.in_channels, 64 // scale, 64 // scale)
    context = torch.randn(1, TOKENS, unet.config.cross_attention_dim)
    extra = {}
    if unet.config.addition_embed_type == "text_time":
        pooled = unet.config.projection_class_embeddings_input_dim - 6 * (
            unet.config.addition_time_embed_dim
        )
        extra["added_cond_kwargs"] = {"text_embeds": torch.randn(1, pooled),
                                      "time_ids": torch.randn(1, 6)}  # fmt: skip
    # Attention as its matrix products, as on the meta device: torch's counter has no formula
    # for the CPU's fused attention kernel, so a real run would leave attention out.
    with torch.inference_mode(), sdpa_kernel(SDPBackend.MATH):
        real_unet = counted(lambda: unet(latent, torch.tensor([999.0]), context, **extra))
        real_decode = counted(lambda: vae.decode(latent[:, : vae.config.latent_channels]))
    assert work.unet_call == real_unet > 0
    assert work.decode_full == real_decode > 0
    assert work.encode > 0 and work.encode_image > 0 and work.decode_tiny is None
    bigger = count_work(path, 128)
    assert bigger.unet_call / work.unet_call > 3.5 and bigger.decode_full / work.decode_full > 3.9
    assert bigger.encode == work.encode  # the prompt's cost does not depend on the size


def test_each_stage_is_divided_by_the_runs_best_measured_peak():
    counts = Work(side=64, encode=1e9, unet_call=4e9, decode_full=6e9, decode_tiny=1e9,
                  encode_image=2e9)  # fmt: skip
    peaks = [Peak(2, matmul=50e9, conv=80e9, conv_shapes={}),
             Peak(2, matmul=60e9, conv=100e9, conv_shapes={})]  # fmt: skip

    def run(config: str, variant: str) -> Run:
        return Run(model="sdxl", config=config, variant=variant, threads=2, encode=0.1,
                   denoise=0.8, decode=0.2, png_store=0.0, total=1.1, calls=4, batch=1,
                   peak_rss_bytes=0)  # fmt: skip

    rows = efficiency_rows(
        {
            "work": counts,
            "peaks": peaks,
            "runs": [run("fast", "service"), run("fast_tiny", "plain")],
        }
    )
    by = {(r["config"], r["stage"]): r for r in rows}
    assert by[("fast", "denoise")]["tflop"] == pytest.approx(4 * 4e9 / 1e12)
    assert by[("fast", "denoise")]["gflops"] == pytest.approx(20.0)  # 16 GFLOP in 0.8 s
    assert by[("fast", "denoise")]["of_peak"] == pytest.approx(0.2)  # of 100 GFLOP/s
    assert by[("fast", "decode")]["tflop"] == pytest.approx(6e-3)  # the full decoder
    assert by[("fast_tiny", "decode")]["tflop"] == pytest.approx(1e-3)  # the tiny one
    image = by[("fast", "image")]
    assert image["tflop"] == pytest.approx((1 + 16 + 6) / 1e3)
    assert image["seconds"] == pytest.approx(1.1)


def test_a_tiled_decode_is_counted_as_it_runs_overlaps_included(hub_root):
    """The full decoder runs in tiles that overlap and are each decoded whole, so its work is
    not the whole image's (SDXL's 1024x1024 in tiles of 512: 1.5x; this tiny VAE's 64x64 in
    tiles of 32: 1.2x): counted as the tiles run it."""
    path = Path(hub_root) / SDXL_REPO
    vae = AutoencoderKL.from_pretrained(path / "vae")
    vae.enable_tiling()
    decode_in_tiles_of(vae, 32)  # the tiny VAE's own tile is 64 pixels
    latent = torch.randn(1, 4, 32, 32)  # a 64x64 image: nine tiles of 32, overlapping
    with torch.inference_mode(), sdpa_kernel(SDPBackend.MATH):
        real_tiled = counted(lambda: vae.decode(latent))
    assert count_decode(path, 64, 32) == real_tiled
    whole = count_decode(path, 64, 0)
    assert whole == count_work(path, 64).decode_full
    untiled = AutoencoderKL.from_pretrained(path / "vae")  # the whole image in one piece
    with torch.inference_mode(), sdpa_kernel(SDPBackend.MATH):
        assert whole == counted(lambda: untiled.decode(latent))
    assert real_tiled != whole
    work = count_work(path, 64, tile=32)
    assert work.decode_tiled == real_tiled and work.decode(tiny=False) == real_tiled


def test_each_run_is_counted_at_its_own_size_and_call_by_call():
    """SDXL-Turbo's row is a 512x512 image in a run whose model size is 1024: its FLOPs are
    the 512 count's; and one UNet call is a row of its own (the parts compared)."""
    big = Work(side=1024, encode=1e9, unet_call=8e9, decode_full=6e9, decode_tiny=2e9,
               encode_image=2e9, decode_tiled=9e9)  # fmt: skip
    small = Work(side=512, encode=1e9, unet_call=2e9, decode_full=1.5e9, decode_tiny=0.5e9,
                 encode_image=0.5e9, decode_tiled=1.5e9)  # fmt: skip
    peak = Peak(2, matmul=100e9, conv=100e9, conv_shapes={})

    def run(config: str, side: int) -> Run:
        return Run(model="sdxl", config=config, variant="service", threads=2, encode=0.1,
                   denoise=0.4, decode=0.2, png_store=0.0, total=0.7, calls=2, batch=1,
                   peak_rss_bytes=0, side=side)  # fmt: skip

    rows = efficiency_rows({"work": big, "works": {1024: big, 512: small}, "peaks": [peak],
                            "runs": [run("turbo", 512), run("fast", 1024)]})  # fmt: skip
    by = {(r["config"], r["stage"]): r for r in rows}
    assert by[("turbo", "unet call")]["tflop"] == pytest.approx(2e-3)
    assert by[("turbo", "unet call")]["seconds"] == pytest.approx(0.2)
    assert by[("turbo", "decode")]["tflop"] == pytest.approx(0.5e-3)  # its tiny decoder
    assert by[("fast", "unet call")]["tflop"] == pytest.approx(8e-3)
    assert by[("fast", "decode")]["tflop"] == pytest.approx(9e-3)  # the full one, in tiles
    assert by[("fast", "image")]["tflop"] == pytest.approx((1 + 16 + 9) / 1e3)


def test_a_peak_childs_result_becomes_its_peak():
    """What the peak child sends back (bench.common.emit_child_result adds its peak RSS; the
    Peak adds `best`): the full-size run stopped at its first peak before this."""
    peak = Peak(2, matmul=1e11, conv=2e11, conv_shapes={"512ch@128": 2e11})
    result = peak.as_dict() | {"peak_rss_bytes": 123}
    assert peak_from_child(result) == peak
