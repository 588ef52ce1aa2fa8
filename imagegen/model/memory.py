"""VAE_TILE_SIZE=auto: full VAE decode tiles chosen from the memory the service may use.

SDXL's own VAE tile is the whole 1024x1024 image. With 512-pixel tiles a request peaked at
1.15-1.25x the fp32 weights, past a 16 GiB container. 256-pixel tiles need about a third of
that, in 0.97x the time (docs/performance.md, "VAE tiles"). But they would cut SD 1.x's
512x512 decode into pieces. So 256 goes only where the limit is below what 512 needs.

The limit is the smaller of the cgroup's and the machine's total memory."""

from collections.abc import Iterable
from pathlib import Path
from typing import Any

CGROUP = Path("/sys/fs/cgroup")
MEMINFO = Path("/proc/meminfo")
TILE, SMALL_TILE = 512, 256
# The 512-tile peak (1.25x the fp32 weights at most, SDXL at 1024x1024) plus a little room. Below
# this many times the weights, tiles of 256.
NEEDS_WITH_TILE = 1.3


def memory_limit(root: Path = CGROUP, meminfo: Path = MEMINFO) -> int | None:
    """Bytes this process may use: the smaller of the cgroup's limit and total memory.

    None when neither can be read."""
    limits = []
    for path in (root / "memory.max", root / "memory" / "memory.limit_in_bytes"):
        try:
            raw = path.read_text().strip()
        except OSError:
            continue
        if raw.isdigit():  # v2 "max", or v1's huge number when unlimited (no harm: min)
            limits.append(int(raw))
        break
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                limits.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    return min(limits) if limits else None


def weights_bytes(components: Iterable[Any]) -> int:
    """The bytes of the parameters and buffers of the torch modules among `components`."""
    import torch

    total = 0
    for component in components:
        if isinstance(component, torch.nn.Module):
            for tensor in (*component.parameters(), *component.buffers()):
                total += tensor.numel() * tensor.element_size()
    return total


def vae_tile_for(weights: int, limit: int | None) -> int:
    """Tiles of 256 pixels where `limit` is below what 512 needs for `weights`, else 512."""
    if limit is not None and limit < NEEDS_WITH_TILE * weights:
        return SMALL_TILE
    return TILE
