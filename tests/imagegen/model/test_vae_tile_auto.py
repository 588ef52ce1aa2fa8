"""VAE_TILE_SIZE=auto (the default): the full VAE's tiles from the memory limit and the
weights. Tiles of 256 where a container's limit is below what tiles of 512 were measured to
need with SDXL (1.25x its fp32 weights at most), 512 elsewhere (SD 1.x's own 512-pixel decode
stays whole). The limit is read from real files laid out as the kernel has them."""

import logging
from pathlib import Path

import pytest

from imagegen.model.memory import memory_limit, vae_tile_for, weights_bytes
from imagegen.model.pipeline import LoadOptions, load_pipeline
from tests.support.model_service import SD_REPO

GIB = 2**30
SDXL_FP32 = int(12.9 * GIB)  # SDXL's fp32 weights (docs/performance.md)
SD15_FP32 = int(3.97 * GIB)


def meminfo(tmp_path: Path, gib: float) -> Path:
    path = tmp_path / "meminfo"
    path.write_text(f"MemTotal:       {int(gib * 2**20)} kB\nMemFree:        1024 kB\n")
    return path


def test_the_limit_is_the_containers_or_the_machines_whichever_is_smaller(tmp_path):
    machine = meminfo(tmp_path, 23.5)
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "memory.max").write_text(f"{16 * GIB}\n")
    assert memory_limit(v2, machine) == 16 * GIB
    (v2 / "memory.max").write_text("max\n")  # no container limit: the machine's
    assert memory_limit(v2, machine) == int(23.5 * 2**20) * 1024
    v1 = tmp_path / "v1"
    (v1 / "memory").mkdir(parents=True)
    (v1 / "memory" / "memory.limit_in_bytes").write_text(f"{8 * GIB}\n")
    assert memory_limit(v1, machine) == 8 * GIB
    # v1 writes a huge number when unlimited: the machine's total is then the limit.
    (v1 / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert memory_limit(v1, machine) == int(23.5 * 2**20) * 1024
    assert memory_limit(tmp_path / "none", tmp_path / "missing") is None


@pytest.mark.parametrize(
    ("weights", "limit_gib", "tile"),
    [
        (SDXL_FP32, 16, 256),  # the reference container: 512-pixel tiles peaked at 16.0 GiB
        (SDXL_FP32, 23.5, 512),  # the development machine: room for 512
        (SD15_FP32, 16, 512),  # SD 1.5 in the same container: its decode stays whole
        (SDXL_FP32, None, 512),  # no limit known: the setting as before
    ],
)
def test_small_tiles_where_the_memory_needs_them(weights, limit_gib, tile):
    limit = None if limit_gib is None else int(limit_gib * GIB)
    assert vae_tile_for(weights, limit) == tile


def test_auto_is_the_default_and_the_loader_applies_it(hub_root, caplog):
    from django.conf import settings

    assert settings.VAE_TILE_SIZE is None  # auto
    with caplog.at_level(logging.INFO, logger="imagegen.model.pipeline"):
        pipe = load_pipeline(
            hub_root / SD_REPO, variant="fp16", device="cpu", options=LoadOptions(vae_tile=None)
        )
    counted = weights_bytes(pipe.components.values())
    assert counted == sum(
        t.numel() * t.element_size()
        for name in ("unet", "vae", "text_encoder")
        for t in (*getattr(pipe, name).parameters(), *getattr(pipe, name).buffers())
    )
    assert f"VAE_TILE_SIZE=auto: tiles of {vae_tile_for(counted, memory_limit())}" in caplog.text
