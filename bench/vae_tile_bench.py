"""VAE tile benchmark: the full SDXL VAE decoding one 1024x1024 image whole and in tiles of
512, 384 and 256 pixels (VAE_TILE_SIZE), each in a fresh process: seconds and peak memory
above the loaded VAE.

Why it exists: SDXL's own tile is the whole 1024x1024 image, whose decode needs about 3.9 GiB
of activations on top of 12.9 GiB of fp32 weights, past a 16 GiB container; the figures for
VAE_TILE_SIZE in docs/performance.md come from here (the whole decode is the baseline of the
same run).

    flock /tmp/fullsize-bench.lock .venv/bin/python bench/vae_tile_bench.py   # about 5 min
"""

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SIDES = (0, 512, 384, 256)  # 0: diffusers' own tile (the whole image)


def child(side: int) -> None:
    import torch
    from diffusers import AutoencoderKL

    from bench.model_fixture import VARIANT, ensure_model
    from imagegen.model.pipeline import decode_in_tiles_of

    torch.set_num_threads(2)
    vae = AutoencoderKL.from_pretrained(
        ensure_model("sdxl"), subfolder="vae", variant=VARIANT, torch_dtype=torch.float32
    )
    vae.enable_slicing()
    vae.enable_tiling()
    if side:
        decode_in_tiles_of(vae, side)
    status = Path("/proc/self/status")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM from here

    def kib(key: str) -> int:
        return int(
            next(line for line in status.read_text().splitlines() if line.startswith(key)).split()[
                1
            ]
        )

    start = kib("VmRSS")
    latents = torch.randn(1, 4, 128, 128, generator=torch.Generator().manual_seed(0))
    began = time.monotonic()
    with torch.inference_mode():
        vae.decode(latents)
    print(f"{time.monotonic() - began:.1f} {(kib('VmHWM') - start) / 2**20:.2f}")


def main() -> int:
    print("SDXL VAE, one 1024x1024 decode, 2 torch threads, each in a fresh process")
    rows = []
    for side in SIDES:
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(side)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        seconds, peak = map(float, out.stdout.split()[-2:])
        rows.append((side, seconds, peak))
        label = "whole (baseline)" if side == 0 else f"tiles of {side}"
        print(f"  {label:<18} decode {seconds:6.1f} s   peak above the VAE {peak:5.2f} GiB")
    whole = rows[0]
    parts = [f"{s}: {t / whole[1]:.2f}x time, {p:.2f} GiB" for s, t, p in rows[1:]]
    print(f"summary: whole {whole[1]:.1f} s, {whole[2]:.2f} GiB | " + " | ".join(parts))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(int(sys.argv[2]))
        sys.exit(0)
    sys.exit(main())
