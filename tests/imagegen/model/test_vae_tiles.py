"""VAE_TILE_SIZE on the tiny pipeline, in this process: the full VAE decodes an image larger
than the tile in tiles of that size (each a call of its decoder), where diffusers' own tile
(the model's native size, here 64 pixels) decodes it whole; the image keeps the asked size."""

from pathlib import Path

import torch

from imagegen.model.pipeline import LoadOptions, load_pipeline
from tests.support.model_service import SD_REPO

SIZE = 64  # the tiny model's native size, in pixels: diffusers' own tile


def decoder_calls(hub_root: Path, tile: int) -> tuple[int, tuple[int, int]]:
    """(calls of the VAE's decoder for one image, the image's size)."""
    pipe = load_pipeline(
        hub_root / SD_REPO, variant="fp16", device="cpu", options=LoadOptions(vae_tile=tile)
    )
    calls = []
    pipe.vae.decoder.register_forward_hook(lambda module, args, out: calls.append(out.shape))
    image = pipe(
        "a lighthouse", num_inference_steps=1, guidance_scale=1.0, height=SIZE, width=SIZE,
        generator=torch.Generator().manual_seed(1),
    ).images[0]  # fmt: skip
    return len(calls), image.size


def test_the_full_vae_decodes_in_tiles_of_vae_tile_size(hub_root):
    assert decoder_calls(hub_root, 0) == (1, (SIZE, SIZE))  # diffusers' tiles: one
    assert decoder_calls(hub_root, 96) == (1, (SIZE, SIZE))  # larger than the native: the same
    # 32 pixels (16 latents), overlapping by a quarter: rows and columns at 0, 12 and 24.
    assert decoder_calls(hub_root, 32) == (9, (SIZE, SIZE))
