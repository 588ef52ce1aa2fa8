"""Cancel bound benchmark: the most a cancel waits inside a running SDXL generation at
1024x1024, with the stop points, beside what it waited before them (a step's end).

Why it exists: docs/image-api.md ("Cancelling a running job") promises that a cancel ends an
SDXL job at 1024x1024 within a bound, in process and in distributed mode. A cancel is taken at
the next stop point (imagegen/generation/stop_points.py: before each part of the UNet's blocks
and of the VAE's decoder), so the longest stretch between two stop points is the most it waits
in process; a worker learns of a cancel from its heartbeat, at most a second later
(imagegen/distributed/worker.py), so distributed mode adds that second. Before the stop points
a cancel was taken only at a step's end: it waited for the whole UNet call, and through the
decode (no steps there) for the whole decode. Those are the baselines, from the same run.

One child process (2 torch threads unless --threads) loads the full-size random-weight SDXL
(bench/model_fixture.py; random weights cost what real ones cost) with the service's own
`load_pipeline` at its defaults (the streaming loader, attention slicing with the fused
kernel, VAE slicing and tiles of VAE_TILE_SIZE's default, 512 pixels), then:

- the UNet: --rounds calls at 1024x1024 of batch 2, the conditional and unconditional pass of
  guidance in one batch: the longest call there is (the shipped default, guidance 0, runs
  batch 1);
- the decoder: one 1024x1024 decode in tiles of 512 (nine overlapping tiles, each one call
  of the decoder).

Each stop point is stamped by a forward pre-hook on the modules `stoppable_modules` names (the
ones StopPoints hooks in the service), the call's start and end too (a step's end is a stop
point, and a decode that ends lets the job end). Reported: each UNet call and each tile whole,
their stop points, and the longest stretches with the parts that bound them.

    flock /tmp/fullsize-bench.lock .venv/bin/python bench/cancel_bound_bench.py  # 16 min (busy)
    flock /tmp/fullsize-bench.lock .venv/bin/python bench/cancel_bound_bench.py --quick

`--quick`: SD 1.5 at 256x256, one UNet call (a smoke run; its decode is one tile).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402

SCRIPT = Path(__file__).resolve()
VAE_TILE = 512  # VAE_TILE_SIZE's default (config/settings.py)
BATCH = 2  # guidance on: the unconditional and the conditional pass in one UNet call
HEARTBEAT = 1.0  # the most a worker's beat waits (WorkerRuntime.interval: min(1, TTL / 3))
TOKENS = 77  # CLIP's sequence length: the text embeddings a UNet call attends to
SIZES = {"sd15": 512, "sdxl": 1024}
SHOWN = 5  # longest stretches printed per measurement


# --- stamping the stop points ---------------------------------------------------------------


@dataclass(frozen=True)
class Stretch:
    """The time between two consecutive stop points, named by the parts they come before."""

    seconds: float
    after: str
    before: str


@dataclass
class Measured:
    """One UNet call or one decode: its time, its stop points, and its stretches between
    them, longest first. `tiles`: the decoder's calls within a decode, each whole."""

    what: str
    seconds: float
    points: int
    longest: list[Stretch]
    tiles: list[float] = field(default_factory=list)
    points_per_tile: int = 0
    load: str = ""  # the machine's load average when it started

    @property
    def longest_stretch(self) -> Stretch:
        return self.longest[0]


class Stamps:
    """A forward pre-hook on each module stoppable_modules(pipe) names, each appending
    (time, the module's name) when the module is about to run; the decoder's forward hook
    marks each tile's end. Hooks stay until close()."""

    def __init__(self, pipe: Any) -> None:
        from imagegen.generation.stop_points import stoppable_modules

        names = {}
        for component in ("unet", "vae"):
            module = getattr(pipe, component, None)
            if module is not None:
                names |= {id(m): f"{component}.{n}" for n, m in module.named_modules()}
        self.marks: list[tuple[float, str]] = []
        self.tile_ends: list[float] = []
        self._hooks = []
        for module in stoppable_modules(pipe):
            name = names[id(module)]
            self._hooks.append(module.register_forward_pre_hook(self._stamp(name)))
        decoder = getattr(getattr(pipe, "vae", None), "decoder", None)
        if decoder is not None:
            self._hooks.append(
                decoder.register_forward_hook(lambda *_: self.tile_ends.append(time.perf_counter()))
            )

    def _stamp(self, name: str) -> Any:
        def hook(_module: Any, _args: Any) -> None:
            self.marks.append((time.perf_counter(), name))

        return hook

    @contextlib.contextmanager
    def around(self, what: str) -> Iterator[list[tuple[float, str]]]:
        """Collects the stop points of the body, with its start and end as points, into the
        list it yields (filled when the body is done)."""
        points: list[tuple[float, str]] = []
        self.marks.clear()
        self.tile_ends.clear()
        started = time.perf_counter()
        yield points
        ended = time.perf_counter()
        points += [(started, f"{what} start"), *self.marks, (ended, f"{what} end")]

    def close(self) -> None:
        for hook in self._hooks:
            hook.remove()


def stretches(points: list[tuple[float, str]]) -> list[Stretch]:
    """Every stretch between consecutive points, longest first."""
    pairs = itertools.pairwise(points)
    found = [Stretch(b[0] - a[0], a[1], b[1]) for a, b in pairs]
    return sorted(found, key=lambda s: s.seconds, reverse=True)


def unet_inputs(unet: Any, *, batch: int, side: int, scale: int, seed: int) -> dict[str, Any]:
    """A UNet call's inputs at `side` pixels, as a pipeline's step gives them: the latents,
    a timestep, the prompts' embeddings and, for SDXL, its pooled embeddings and size ids."""
    import torch

    config = unet.config
    generator = torch.Generator().manual_seed(seed)

    def noise(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator)

    inputs = {
        "sample": noise(batch, config.in_channels, side // scale, side // scale),
        "timestep": torch.tensor(999),
        "encoder_hidden_states": noise(batch, TOKENS, config.cross_attention_dim),
    }
    if config.addition_embed_type == "text_time":  # SDXL: pooled text and 6 size ids
        ids = 6
        pooled = config.projection_class_embeddings_input_dim - ids * config.addition_time_embed_dim
        inputs["added_cond_kwargs"] = {"text_embeds": noise(batch, pooled),
                                       "time_ids": noise(batch, ids)}  # fmt: skip
    return inputs


def measure_unet_call(pipe: Any, stamps: Stamps, *, batch: int, side: int, seed: int) -> Measured:
    """One UNet call, whole and between its stop points."""
    import torch

    inputs = unet_inputs(pipe.unet, batch=batch, side=side, scale=pipe.vae_scale_factor, seed=seed)
    load = common.load_average()
    with torch.inference_mode(), stamps.around("call") as points:
        pipe.unet(**inputs)
    return Measured(
        what=f"UNet call, batch {batch}, {side}x{side}",
        seconds=points[-1][0] - points[0][0],
        points=len(points) - 2,
        longest=stretches(points),
        load=load,
    )


def measure_decode(pipe: Any, stamps: Stamps, *, side: int, seed: int) -> Measured:
    """One decode of `side` pixels by the full VAE (in tiles where it is larger than the
    tile): whole, each tile (a call of its decoder) whole, and between its stop points."""
    import torch

    scale = pipe.vae_scale_factor
    generator = torch.Generator().manual_seed(seed)
    latents = torch.randn(1, pipe.vae.config.latent_channels, side // scale, side // scale,
                          generator=generator)  # fmt: skip
    load = common.load_average()
    with torch.inference_mode(), stamps.around("decode") as points:
        pipe.vae.decode(latents)
    starts = [t for t, name in points if name == "vae.decoder"]
    tiles = [end - start for start, end in zip(starts, stamps.tile_ends, strict=True)]
    return Measured(
        what=f"decode, {side}x{side}, {len(tiles)} tile(s)",
        seconds=points[-1][0] - points[0][0],
        points=len(points) - 2,
        longest=stretches(points),
        tiles=tiles,
        points_per_tile=(len(points) - 2) // max(len(tiles), 1),
        load=load,
    )


# --- the child: load once, measure ---------------------------------------------------------


def child(args: argparse.Namespace) -> int:
    from bench.model_fixture import VARIANT, ensure_model
    from imagegen.model.pipeline import LoadOptions, load_pipeline

    started = time.perf_counter()
    pipe = load_pipeline(
        ensure_model(args.model), variant=VARIANT, device="cpu",
        options=LoadOptions(threads=args.threads, vae_tile=VAE_TILE),
    )  # fmt: skip
    load_seconds = time.perf_counter() - started
    print(f"loaded in {load_seconds:.1f} s", file=sys.stderr, flush=True)
    stamps = Stamps(pipe)
    calls = []
    for round_ in range(args.rounds):
        wait_for_quiet(args)
        calls.append(measure_unet_call(pipe, stamps, batch=BATCH, side=args.size, seed=round_))
        print(f"UNet call {round_ + 1}: {calls[-1].seconds:.1f} s", file=sys.stderr, flush=True)
    wait_for_quiet(args)
    decode = measure_decode(pipe, stamps, side=args.size, seed=0)
    stamps.close()
    common.emit_child_result({
        "load_seconds": load_seconds,
        "calls": [asdict(c) for c in calls],
        "decode": asdict(decode),
    })  # fmt: skip
    return 0


def wait_for_quiet(args: argparse.Namespace) -> None:
    """Waits (up to --quiet-wait seconds) until the 1-minute load average is below
    --quiet-load: on a shared machine other work slows whatever it meets, and two torch
    threads that wait for each other slow down by more than their share."""
    deadline = time.monotonic() + args.quiet_wait
    while os.getloadavg()[0] > args.quiet_load and time.monotonic() < deadline:
        time.sleep(5)


def measured(raw: dict[str, Any]) -> Measured:
    return Measured(**raw | {"longest": [Stretch(**s) for s in raw["longest"]]})


# --- the report -------------------------------------------------------------------------------


def print_measured(m: Measured) -> None:
    tiles = ""
    if m.tiles:
        tiles = (
            f"; tiles {min(m.tiles):.2f}-{max(m.tiles):.2f} s, {m.points_per_tile} stop points each"
        )
    print(f"  {m.what}: {m.seconds:.2f} s whole, {m.points} stop points{tiles} (load {m.load})")
    for s in m.longest[:SHOWN]:
        print(f"    {s.seconds:6.2f} s  from {s.after} to {s.before}")


def bounds(calls: list[Measured], decode: Measured) -> dict[str, Any]:
    """What a cancel waits at most in this run: with the stop points, the longest stretch;
    before them, the longest whole UNet call, tile and decode."""
    call_stretch = max((c.longest_stretch for c in calls), key=lambda s: s.seconds)
    in_process = max(call_stretch.seconds, decode.longest_stretch.seconds)
    return {
        "unet_stretch": asdict(call_stretch),
        "unet_call_whole": max(c.seconds for c in calls),
        "decode_stretch": asdict(decode.longest_stretch),
        "tile_whole": max(decode.tiles) if decode.tiles else decode.seconds,
        "decode_whole": decode.seconds,
        "in_process": in_process,
        "distributed": in_process + HEARTBEAT,
    }


def print_bounds(b: dict[str, Any], tiles: int) -> None:
    rows = [
        ("one UNet call (batch 2)", b["unet_call_whole"], b["unet_stretch"]),
        (f"one decoder tile ({VAE_TILE} px)", b["tile_whole"], b["decode_stretch"]),
    ]
    print("\nthe most a cancel waits, this run:")
    header = f"{'before: the whole part':>24} {'with stop points':>18} {'ratio':>7}"
    print(f"  {'':<28}{header}")
    for label, whole, stretch in rows:
        print(
            f"  {label:<28}{whole:>22.2f} s {stretch['seconds']:>16.2f} s "
            f"{stretch['seconds'] / whole:>6.3f}x"
        )
    print(
        f"  (before the stop points a cancel during the decode waited for all of it: "
        f"{b['decode_whole']:.1f} s, {tiles} tile(s))"
    )
    print(
        f"  cancel within {b['in_process']:.2f} s in process, {b['distributed']:.2f} s "
        f"distributed (+{HEARTBEAT:g} s: the worker's heartbeat)"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="sdxl", choices=sorted(SIZES))
    parser.add_argument("--rounds", type=int, default=2, help="UNet calls measured (2)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads")
    parser.add_argument(
        "--quiet-load", type=float, default=0.5,
        help="wait before each measurement until the 1-min load average is below this (0.5)",
    )  # fmt: skip
    parser.add_argument(
        "--quiet-wait", type=float, default=120, help="waiting for that at most (120 s)"
    )
    parser.add_argument("--quick", action="store_true", help="SD 1.5 at 256x256, one call")
    parser.add_argument("--force", action="store_true", help="run even if memory looks short")
    parser.add_argument("--json", type=Path, help="where to write results")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    if args.quick:
        args.model, args.rounds = "sd15", 1
    args.size = args.size or (SIZES[args.model] // 2 if args.quick else SIZES[args.model])
    return args


def run(args: argparse.Namespace) -> int:
    from bench.model_fixture import ensure_model, fp32_bytes, scratch_dir

    machine = common.machine_info()
    common.print_machine(machine, f"torch threads {args.threads}")
    fp32 = fp32_bytes(ensure_model(args.model))
    common.check_memory(int(1.3 * fp32) + 3 * common.GIB, args.force)
    primed = common.prime_size(int(1.5 * fp32))
    print(f"primed {primed / common.GIB:.1f} GiB in {common.prime_memory(primed):.1f} s")
    work = scratch_dir("cancel-bound-")
    child_args = ["--model", args.model, "--rounds", str(args.rounds), "--threads",
                  str(args.threads), "--size", str(args.size), "--quiet-load",
                  str(args.quiet_load), "--quiet-wait", str(args.quiet_wait)]  # fmt: skip
    started = time.monotonic()
    try:
        result = common.run_child(SCRIPT, child_args, work / "child.log", 7200, env={})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    calls = [measured(c) for c in result["calls"]]
    decode = measured(result["decode"])
    print(
        f"\n{args.model} at {args.size}x{args.size}, VAE tiles of {VAE_TILE}, loaded in "
        f"{result['load_seconds']:.1f} s, peak RSS {result['peak_rss_bytes'] / common.GIB:.2f} GiB"
    )
    for m in [*calls, decode]:
        print_measured(m)
    found = bounds(calls, decode)
    print_bounds(found, len(decode.tiles))
    summary = (
        f"summary: {args.model} {args.size}x{args.size}: longest stretch between stop points "
        f"{found['unet_stretch']['seconds']:.2f} s in a UNet call (whole call "
        f"{found['unet_call_whole']:.1f} s), {found['decode_stretch']['seconds']:.2f} s in the "
        f"decode (whole tile {found['tile_whole']:.1f} s, whole decode "
        f"{found['decode_whole']:.1f} s); cancel within {found['in_process']:.1f} s in process, "
        f"{found['distributed']:.1f} s distributed | run took {time.monotonic() - started:.0f} s"
    )
    document = {
        "machine": machine | {"load_average_at_end": common.load_average()},
        "config": {
            "model": args.model,
            "size": args.size,
            "batch": BATCH,
            "rounds": args.rounds,
            "threads": args.threads,
            "vae_tile": VAE_TILE,
        },
        "calls": [asdict(c) for c in calls],
        "decode": asdict(decode),
        "bounds": found,
        "summary": summary,
    }
    written = common.write_json("cancel_bound", document, args.json)
    print(f"\nresults written to {written}")
    print(summary)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return child(args)
    common.install_signal_handlers()
    try:
        return run(args)
    except common.Interrupted:
        print("\ninterrupted; the child and temp files were cleaned up", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
