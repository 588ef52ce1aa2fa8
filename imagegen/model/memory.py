"""VAE_TILE_SIZE=auto: the full VAE's decode tiles chosen from the memory the service may use.

Why: SDXL's own VAE tile is the whole 1024x1024 image (3.9 GiB of activations on top of 12.9
GiB of fp32 weights). In tiles of 512 pixels the service's peak in a request was 1.15-1.25x
the weights (16.0 GiB at most), past a 16 GiB container; in tiles of 256 the decode needs
about a third of that (0.3 against 0.95-1.14 GiB above the VAE) for 0.97x the time of 512 in
the same run (docs/performance.md, "VAE tiles"). Smaller tiles are not always free, though:
they would cut SD 1.x's 512x512 decode, which 512 leaves whole, into overlapping pieces. So
the small tiles go where the memory needs them: where the memory limit is below what the
weights and 512-pixel tiles were measured to take.

The limit is the container's (cgroup v2 `memory.max`, else v1 `memory.limit_in_bytes`), or
the machine's total memory where no container limit is set, whichever is smaller.
"""

from collections.abc import Iterable
from pathlib import Path
from typing import Any

CGROUP = Path("/sys/fs/cgroup")
MEMINFO = Path("/proc/meminfo")
TILE, SMALL_TILE = 512, 256
# The peak with tiles of 512 (1.25x the fp32 weights at most, SDXL at 1024x1024) and a little
# room for the rest of the process: below this many times the weights, tiles of 256.
NEEDS_WITH_TILE = 1.3


def memory_limit(root: Path = CGROUP, meminfo: Path = MEMINFO) -> int | None:
    """Bytes this process may use: the cgroup's limit or the machine's total, the smaller;
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
    """VAE_TILE_SIZE=auto for a pipeline of `weights` bytes under a memory `limit`: tiles of
    256 pixels where the limit is below what tiles of 512 were measured to need, else 512
    (which leaves SD 1.x's own 512-pixel decode whole)."""
    if limit is not None and limit < NEEDS_WITH_TILE * weights:
        return SMALL_TILE
    return TILE
