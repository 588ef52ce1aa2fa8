"""torch.compile (inductor, fp32, CPU) against eager, part by part, and whether the compiled
artefacts can be reused by the next process.

Why it exists: plain diffusers in eager mode is the baseline; a compiler is the one way left
to run the same fp32 work faster. One run measures, per part (a UNet call of batch 2, as with
guidance on, or the tiny decoder's decode), on full-size random weights
(bench/model_fixture.py), each variant in a fresh child process:

- eager: the part as loaded; seconds per call (median of `--calls` after one warm-up);
- compiled (cold): `torch.compile(part)` with an empty inductor cache folder; the first call
  pays the compile (compile seconds = first call - eager's median call);
- the same with the cache the cold child left (warm local cache), and with that cache copied
  to another folder and moved into place by one rename (as if published to a share and copied
  down), and with an empty cache fed the portable artefacts the cold child saved
  (`torch.compiler.save_cache_artifacts`, one file: what a share could hold with no lock).

Each child also saves the part's output; the run reports the largest difference between a
compiled output and eager's for the same inputs (the decoder's in 8-bit pixel levels).

    .venv/bin/python bench/compile_bench.py                        # every part (hours)
    .venv/bin/python bench/compile_bench.py --parts sd15-unet-512  # one part
    .venv/bin/python bench/compile_bench.py --parts sdxl-unet-512 --reuse-variants copied
    .venv/bin/python bench/compile_bench.py --smoke                # tiny UNet 64x64
    .venv/bin/python bench/compile_bench.py --dry-run              # the header and plan only
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from bench.common import GIB, fmt_ratio, median, ratio  # noqa: E402
from bench.model_fixture import ensure_model, ensure_tiny_decoder, scratch_dir, spec_for  # noqa: E402

SCRIPT = Path(__file__).resolve()
SEED = 42


@dataclass(frozen=True)
class Part:
    name: str
    model: str  # bench/model_fixture.py's name, or "taesdxl" for the tiny decoder
    kind: str  # "unet" or "decoder"
    side: int  # image side in pixels; latents are side / 8


PARTS = {
    part.name: part
    for part in (
        Part("sd15-unet-512", "sd15", "unet", 512),
        Part("taesdxl-512", "taesdxl", "decoder", 512),
        Part("sdxl-unet-512", "sdxl", "unet", 512),
        Part("taesdxl-1024", "taesdxl", "decoder", 1024),
        Part("sdxl-unet-1024", "sdxl", "unet", 1024),
        Part("tiny-unet-64", "tiny", "unet", 64),
    )
}
DEFAULT_PARTS = [name for name in PARTS if name != "tiny-unet-64"]
COMPILED = ("compiled-cold", "compiled-warm-local", "compiled-copied", "compiled-artefacts")
REUSE = ["warm-local", "copied", "artefacts"]  # the second-process variants, COMPILED[1:]


@dataclass
class Row:
    part: str
    variant: str
    median_call_seconds: float
    call_seconds: list[float]
    first_call_seconds: float
    load_seconds: float
    peak_rss_bytes: int
    compile_seconds: float | None = None
    max_abs_diff_vs_eager: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)


# --- children ----------------------------------------------------------------------------------


def load_part(part: Part) -> Any:
    import torch

    if part.kind == "decoder":
        from diffusers import AutoencoderTiny

        return AutoencoderTiny.from_pretrained(ensure_tiny_decoder("sdxl")).eval()
    from diffusers import UNet2DConditionModel

    folder = spec_for(part.model).path / "unet"
    variant = "fp16" if any(folder.glob("*.fp16.safetensors")) else None
    unet = UNet2DConditionModel.from_pretrained(folder, variant=variant, torch_dtype=torch.float32)
    return unet.eval()


def inputs_for(part: Part, model: Any) -> dict[str, Any]:
    """Seeded inputs shaped as the pipeline passes them: batch 2 (guidance on) to a UNet, one
    latent to the decoder."""
    import torch

    generator = torch.Generator("cpu").manual_seed(SEED)
    side = part.side // 8
    if part.kind == "decoder":
        return {"latents": torch.randn(1, 4, side, side, generator=generator)}
    config = model.config
    inputs: dict[str, Any] = {
        "sample": torch.randn(2, config.in_channels, side, side, generator=generator),
        "timestep": torch.tensor(999),
        "encoder_hidden_states": torch.randn(
            2, 77, config.cross_attention_dim, generator=generator
        ),
    }
    if config.addition_embed_type == "text_time":
        pooled = config.projection_class_embeddings_input_dim - 6 * config.addition_time_embed_dim
        inputs["added_cond_kwargs"] = {
            "text_embeds": torch.randn(2, pooled, generator=generator),
            "time_ids": torch.tensor(
                [[part.side, part.side, 0, 0, part.side, part.side]] * 2, dtype=torch.float32
            ),
        }
    return inputs


def call_part(part: Part, model: Any, inputs: dict[str, Any]) -> Any:
    if part.kind == "decoder":
        return model.decode(inputs["latents"]).sample
    return model(**inputs).sample


def run_as_child(args: argparse.Namespace) -> int:
    import torch

    variant = args.child[0]
    part = PARTS[args.parts[0]]
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    model = load_part(part)
    load_seconds = time.perf_counter() - started
    inputs = inputs_for(part, model)
    loaded_artefacts = None
    if variant != "eager":
        if args.load_artefacts:
            loaded_artefacts = bool(
                torch.compiler.load_cache_artifacts(Path(args.load_artefacts).read_bytes())
            )
        target = model.decoder if part.kind == "decoder" else model
        compiled = torch.compile(target)
        if part.kind == "decoder":
            model.decoder = compiled
        else:
            model = compiled
    calls: list[float] = []
    with torch.inference_mode():
        for _ in range(args.calls + 1):
            began = time.perf_counter()
            output = call_part(part, model, inputs)
            calls.append(time.perf_counter() - began)
    torch.save(output, Path(args.output))
    saved_artefacts = None
    if args.save_artefacts:
        artefacts = torch.compiler.save_cache_artifacts()
        if artefacts is not None:
            Path(args.save_artefacts).write_bytes(artefacts[0])
            saved_artefacts = len(artefacts[0])
    common.emit_child_result({
        "calls": calls, "load_seconds": load_seconds, "torch_threads": torch.get_num_threads(),
        "saved_artefact_bytes": saved_artefacts, "loaded_artefacts": loaded_artefacts,
    })  # fmt: skip
    return 0


# --- the run -------------------------------------------------------------------------------------


def output_difference(part: Part, eager: Path, other: Path) -> float:
    """The largest difference from eager's output: in 8-bit pixel levels for the decoder (what
    an image shows), as a plain float for a UNet's noise prediction."""
    import torch

    first, second = torch.load(eager), torch.load(other)
    if part.kind == "decoder":
        first, second = (((t.clamp(-1, 1) + 1) * 127.5).round() for t in (first, second))
    return float((first - second).abs().max())


def measure(part: Part, variant: str, args: argparse.Namespace, work: Path) -> Row:
    caches = work / "caches"
    cache = {
        "eager": None,
        "compiled-cold": caches / "local",
        "compiled-warm-local": caches / "local",
        "compiled-copied": caches / "published",
        "compiled-artefacts": caches / "empty",
    }[variant]
    artefacts = work / f"{part.name}.artefacts"
    extra: list[str] = []
    if variant == "compiled-cold":
        shutil.rmtree(caches, ignore_errors=True)
        extra = ["--save-artefacts", str(artefacts)]
    elif variant == "compiled-copied":
        # A copy beside the target, then one rename: what a share's reader would get.
        partial = caches / "published.partial"
        shutil.copytree(caches / "local", partial)
        partial.rename(caches / "published")
    elif variant == "compiled-artefacts":
        extra = ["--load-artefacts", str(artefacts)]
    env = {"TORCHINDUCTOR_CACHE_DIR": str(cache)} if cache else {}
    calls = args.calls if variant in ("eager", "compiled-cold") else 1
    output = work / f"{part.name}-{variant}.pt"
    result = common.run_child(
        SCRIPT,
        [variant, "--parts", part.name, "--calls", str(calls), "--threads", str(args.threads),
         "--output", str(output), *extra],
        work / f"{part.name}-{variant}.log",
        timeout=7200,
        env=env,
    )  # fmt: skip
    timed = result["calls"][1:]
    row = Row(
        part=part.name,
        variant=variant,
        median_call_seconds=median(timed),
        call_seconds=result["calls"],
        first_call_seconds=result["calls"][0],
        load_seconds=result["load_seconds"],
        peak_rss_bytes=result["peak_rss_bytes"],
        detail={
            k: result[k]
            for k in ("torch_threads", "saved_artefact_bytes", "loaded_artefacts")
            if result.get(k) is not None
        },
    )
    print(
        f"  {part.name:<15} {variant:<20} calls {' '.join(f'{s:.2f}' for s in row.call_seconds)}"
        f" s | load {row.load_seconds:.1f} s | peak RSS {row.peak_rss_bytes / GIB:.2f} GiB",
        flush=True,
    )
    return row


def measure_part(part: Part, args: argparse.Namespace, work: Path) -> list[Row]:
    reused = [f"compiled-{name}" for name in args.reuse_variants] if args.reuse else []
    variants = ["eager", "compiled-cold", *reused]
    rows = [measure(part, variant, args, work) for variant in variants]
    eager = rows[0]
    for row in rows[1:]:
        row.compile_seconds = row.first_call_seconds - eager.median_call_seconds
        row.max_abs_diff_vs_eager = output_difference(
            part, work / f"{part.name}-eager.pt", work / f"{part.name}-{row.variant}.pt"
        )
    return rows


def print_rows(rows: list[Row]) -> None:
    names = ("part", "variant", "s/call", "speed-up", "1st call", "compile s", "max diff")
    columns = [(names[0], 15), (names[1], 20)] + [(n, 9) for n in names[2:]]
    eager = {r.part: r for r in rows if r.variant == "eager"}
    common.print_table([*columns, ("peak GiB", 8), ("", 0)], [
        [r.part, r.variant, f"{r.median_call_seconds:.2f}",
         fmt_ratio(ratio(eager[r.part].median_call_seconds, r.median_call_seconds)),
         f"{r.first_call_seconds:.1f}",
         "-" if r.compile_seconds is None else f"{r.compile_seconds:.1f}",
         "-" if r.max_abs_diff_vs_eager is None else f"{r.max_abs_diff_vs_eager:.2g}",
         f"{r.peak_rss_bytes / GIB:.2f}", ""]
        for r in rows
    ])  # fmt: skip


def summarize(rows: list[Row]) -> str:
    eager = {r.part: r for r in rows if r.variant == "eager"}
    cold = {r.part: r for r in rows if r.variant == "compiled-cold"}
    pieces = [
        f"{name} {fmt_ratio(ratio(eager[name].median_call_seconds, c.median_call_seconds))} "
        f"(compile {c.compile_seconds or 0:.0f} s)"
        for name, c in cold.items()
    ]
    return "summary: torch.compile speed-up per call vs eager: " + (", ".join(pieces) or "none")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--parts",
        type=lambda text: text.split(","),
        default=DEFAULT_PARTS,
        help=f"comma-separated, from {', '.join(PARTS)} (default: all but tiny, cheapest first)",
    )
    parser.add_argument("--calls", type=int, default=3, help="timed calls after a warm-up (3)")
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count() or 1, help="torch threads (nproc)"
    )
    parser.add_argument(
        "--no-reuse",
        dest="reuse",
        action="store_false",
        help="skip the second-process variants (warm, copied, artefacts)",
    )
    parser.add_argument(
        "--reuse-variants",
        type=lambda text: text.split(","),
        default=REUSE,
        help=f"which second-process variants, comma-separated, from {', '.join(REUSE)} (all)",
    )
    parser.add_argument("--smoke", action="store_true", help="the tests' tiny UNet at 64x64")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the header and the plan, measure nothing"
    )
    parser.add_argument("--json", type=Path, help="where to write results")
    parser.add_argument("--child", nargs=1, metavar="VARIANT", help=argparse.SUPPRESS)
    parser.add_argument("--output", help=argparse.SUPPRESS)
    parser.add_argument("--save-artefacts", help=argparse.SUPPRESS)
    parser.add_argument("--load-artefacts", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke:
        args.parts, args.calls, args.threads = ["tiny-unet-64"], 2, 1
    unknown = [name for name in args.parts if name not in PARTS]
    if unknown:
        parser.error(f"--parts: unknown {', '.join(unknown)}; expected from {', '.join(PARTS)}")
    wrong = [name for name in args.reuse_variants if name not in REUSE]
    if wrong:
        parser.error(
            f"--reuse-variants: unknown {', '.join(wrong)}; expected from {', '.join(REUSE)}"
        )
    if args.calls < 1 or args.threads < 1:
        parser.error("--calls and --threads must be >= 1")
    return args


def run(args: argparse.Namespace) -> int:
    import torch

    machine = common.machine_info()
    common.print_machine(
        machine, f"torch {torch.__version__}, threads {args.threads} (set in each child)"
    )
    print(f"parts: {', '.join(args.parts)} | {args.calls} timed calls after one warm-up")
    config = {"parts": args.parts, "calls": args.calls, "threads": args.threads,
              "reuse": args.reuse and args.reuse_variants, "torch": torch.__version__,
              "seed": SEED}  # fmt: skip
    if args.dry_run:
        summary = "summary: dry run, nothing measured"
        common.finish("compile", machine, {"config": config, "results": []}, summary, args.json)
        return 0
    rows: list[Row] = []
    work = scratch_dir("compile-bench-")
    try:
        for name in args.parts:
            part = PARTS[name]
            if part.kind == "unet":
                ensure_model(part.model)
            rows += measure_part(part, args, work)
            # Every finished part is written at once: a later part may run for hours.
            document = {"config": config, "results": [asdict(r) for r in rows]}
            common.write_json("compile", document | {"summary": "partial"}, args.json)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_rows(rows)
    document = {"config": config, "results": [asdict(r) for r in rows]}
    common.finish("compile", machine, document, summarize(rows), args.json)
    return 0


def main(argv: list[str] | None = None) -> int:
    return common.main(parse_args, run, run_as_child, argv)


if __name__ == "__main__":
    sys.exit(main())
