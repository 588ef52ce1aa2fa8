"""Edit benchmark: img2img and inpainting through `POST /generate`, beside plain diffusers'
`AutoPipelineForImage2Image` / `AutoPipelineForInpainting` with the same settings, on
full-size random-weight SDXL at 1024x1024 with the shipped fast preset (issue 26,
"Performance").

Why it exists: an edit runs the pipeline of the loaded one's components
(imagegen.model.edit_pipelines), prepares its inputs (imagegen.generation.edit_inputs, framing,
masks) and pastes an inpainting's answer back; each of these could cost time or memory that
plain diffusers does not pay, and "only masked" is only worth having if it really makes a
small fix cheap. So one run measures, each request in its own process (a fresh app, or a
fresh plain child), so its peak RSS is its own:

- `text_to_image`: the service's text-to-image request at the same size: the peak RSS the
  edits are held to (an edit must not cost a second copy of any weight);
- `img2img`: strength 0.5 (of the preset's 4 steps, 2 run), the service against plain
  diffusers' `AutoPipelineForImage2Image.from_pipe` of the same loaded pipeline;
- `inpaint`: the same with a mask (a centred square of a quarter of the side: 256x256 in
  1024x1024, blurred by mask_blur's default 4), against `AutoPipelineForInpainting`;
- `only_masked`: the same inpaint with only_masked=true (A1111's inpaint_full_res, padding
  32): the marked area's box is cut out, worked at its own size and pasted back; held to the
  whole-image inpaint of the same mask.

The service is the real app under gunicorn (tests.support.processes.AppServer, DEVICE=cpu)
as it ships: the random SDXL placed on the share as the default MODEL_ID with a random LoRA
of SDXL-Lightning's 4-step rank and layers as its file and TAESDXL's architecture as its
decoder (bench/model_fixture.py), nothing configured, so its preset gives 4 steps, guidance
0, trailing Euler and the tiny decoder (which also encodes an edit's image); one app per
request, loaded before timing. The edits are sent as multipart forms (`image`, `mask`,
`strength`, `only_masked`), so the request runs every function a job runs. Plain diffusers is
one child per request: `DiffusionPipeline.from_pretrained(variant="fp16", dtype=float32)`, the
same LoRA loaded and fused, `AutoencoderTiny` as its VAE (slicing and tiling, as the service
has it), trailing Euler, then `from_pipe` into the edit pipeline, called with the same image,
mask (blurred by diffusers' own `mask_processor.blur`, 4), strength, steps, guidance and seed,
timed from its call to the PNG on disk.

Each request is timed by stage (encode: the text encoders and the image's VAE encode, to the
first UNet call; the UNet calls; the decode; the rest: PNG, store and for the service HTTP and
the inputs' checks), with its process's CPU seconds and peak RSS (VmHWM reset before it).

Run it alone on the machine (SDXL in fp32 is about 14 GB; one pipeline at a time):

    flock /tmp/fullsize-bench.lock .venv/bin/python bench/edit_bench.py   # about 15 minutes
    .venv/bin/python bench/edit_bench.py --quick   # the tests' tiny SDXL at 256x256: a smoke run
    .venv/bin/python bench/edit_bench.py --smoke   # the same at 64x64, img2img only: tests/bench/
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from bench.common import GIB  # noqa: E402
from bench.model_fixture import (  # noqa: E402
    CACHE,
    DEFAULT_LORA_FILE,
    DEFAULT_LORA_REPO,
    ensure_default_lora,
    ensure_model,
    ensure_tiny_decoder,
    fp32_bytes,
    place_on_share,
    scratch_dir,
    weight_files,
)
from bench.time_to_image_bench import (  # noqa: E402
    SHIPPED,
    cpu_seconds,
    image_difference,
    proc_bytes,
    reset_peak,
    service_app,
    service_env,
    wait_for_quiet,
    wait_ready,
    worker_pid,
)
from imagegen.model.adapters import (  # noqa: E402
    DEFAULT_MODEL_ADAPTERS,
    DEFAULT_MODEL_ID,
    parse_adapters,
)

SCRIPT = Path(__file__).resolve()
PROMPT = "a photo of an astronaut riding a horse on the sea at sunset, detailed"
SEED = 42
STRENGTH = 0.5
MASK_BLUR = 4  # the service's default (A1111's), sent by no one here
PRESET = {"steps": 4, "guidance": 0.0, "scheduler": "Euler SGM Uniform"}  # what ships
EDIT_STEPS = max(1, int(PRESET["steps"] * STRENGTH))
QUICK_HUB = CACHE / "quick-hub"
SMOKE_SIDE = 64  # the service's smallest image
TARGETS = {"edit_vs_plain": 1.05, "peak_vs_text_to_image": 1.05, "only_masked_vs_inpaint": 0.35}


@dataclass(frozen=True)
class Source:
    """What is measured: the diffusers repo, the default LoRA's file and the tiny decoder's
    folder (placed on the share under the shipped names), and the size."""

    name: str
    model: Path
    hub_root: Path  # holds the LoRA at <DEFAULT_LORA_REPO>/<DEFAULT_LORA_FILE>
    decoder: Path
    size: int

    @property
    def lora(self) -> Path:
        return self.hub_root / DEFAULT_LORA_REPO / DEFAULT_LORA_FILE


def full_source() -> Source:
    """Full-size random-weight SDXL, its random Lightning-sized LoRA and TAESDXL."""
    lora = ensure_default_lora()
    return Source("sdxl", ensure_model("sdxl"), lora.parents[2], ensure_tiny_decoder("sdxl"), 1024)


def quick_source(hub: Path) -> Source:
    """The tests' tiny SDXL (tests.support.tiny_model), a rank-4 random LoRA under the
    default LoRA's name and a tiny TAESD-shaped decoder: the same run in seconds. Its native
    size with an 8x decoder is 256x256."""
    from tests.support.tiny_adapters import build_tiny_decoder, random_lora, save_lora, to_kohya
    from tests.support.tiny_model import build_tiny_pipeline

    model = hub / "testorg" / "tiny-sdxl"
    if not (model / "model_index.json").is_file():
        build_tiny_pipeline(model, layout="sdxl")
    lora = hub / DEFAULT_LORA_REPO / DEFAULT_LORA_FILE
    if not lora.is_file():
        unet = json.loads((model / "unet" / "config.json").read_text())
        state = random_lora(unet, rank=4, alpha=4.0, seed=SEED, strength=0.05)
        save_lora(to_kohya(state, alpha=4.0), lora)
    decoder = build_tiny_decoder(hub / "madebyollin" / "taesdxl", seed=12)
    return Source("tiny-sdxl", model, hub, decoder, 256)


@dataclass(frozen=True)
class Case:
    name: str
    edit: bool = True
    mask: bool = False
    only_masked: bool = False

    @property
    def steps(self) -> int:
        return EDIT_STEPS if self.edit else PRESET["steps"]

    def form(self, size: int) -> dict[str, str]:
        fields = {"prompt": PROMPT, "seed": str(SEED)}
        if not self.edit:
            return fields | {"size": f"{size}x{size}"}
        fields["strength"] = f"{STRENGTH:g}"
        return fields | ({"only_masked": "true"} if self.only_masked else {})


TEXT_TO_IMAGE = Case("text_to_image", edit=False)
IMG2IMG = Case("img2img")
INPAINT = Case("inpaint", mask=True)
ONLY_MASKED = Case("only_masked", mask=True, only_masked=True)
CASES = {c.name: c for c in (TEXT_TO_IMAGE, IMG2IMG, INPAINT, ONLY_MASKED)}
WITH_PLAIN = ("img2img", "inpaint")  # plain diffusers has no "only masked"


@dataclass
class Run:
    """One request's figures, seconds and bytes."""

    case: str
    variant: str  # service | plain
    encode: float  # to the first UNet call: the text encoders and the image's encode
    denoise: float
    decode: float
    rest: float  # PNG and store; the service's also HTTP, the inputs' checks, the queue
    total: float
    calls: int
    cpu: float
    peak_rss_bytes: int
    load: str
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def per_call(self) -> float:
        return self.denoise / max(1, self.calls)


# --- the inputs ---------------------------------------------------------------------------------


def write_inputs(size: int, work: Path) -> tuple[Path, Path]:
    """(image, mask) PNGs of `size`: a picture with smooth gradients and shapes (a photo's
    PNG size, not noise's), and a white centred square of a quarter of the side on black."""
    import numpy as np
    from PIL import Image, ImageDraw

    ramp = np.linspace(0, 255, size, dtype=np.float32)
    pixels = np.stack(
        [
            np.add.outer(ramp, ramp) / 2,
            np.add.outer(ramp[::-1], ramp) / 2,
            np.tile(ramp, (size, 1)),
        ],
        axis=-1,
    ).astype(np.uint8)
    image = Image.fromarray(pixels, "RGB")
    draw = ImageDraw.Draw(image)
    draw.ellipse((size // 8, size // 8, size // 2, size // 2), fill=(200, 40, 40))
    draw.rectangle((size // 2, size // 2, size * 7 // 8, size * 7 // 8), fill=(30, 60, 200))
    mask = Image.new("L", (size, size), 0)
    side = size // 4
    corner = (size - side) // 2
    ImageDraw.Draw(mask).rectangle((corner, corner, corner + side - 1, corner + side - 1), fill=255)
    paths = work / "input.png", work / "mask.png"
    image.save(paths[0])
    mask.save(paths[1])
    return paths


# --- plain diffusers, one child per request ---------------------------------------------------


def plain_child(args: argparse.Namespace) -> int:
    """Loads plain diffusers as its documentation says for these settings, then one edit."""
    import torch
    from diffusers import (
        AutoencoderTiny,
        AutoPipelineForImage2Image,
        AutoPipelineForInpainting,
        DiffusionPipeline,
        EulerDiscreteScheduler,
    )
    from PIL import Image

    torch.set_num_threads(args.threads)
    case = CASES[args.case]
    started = time.perf_counter()
    base = DiffusionPipeline.from_pretrained(args.model_path, variant="fp16", dtype=torch.float32)
    lora = Path(args.lora)
    base.load_lora_weights(lora.parent, weight_name=lora.name)
    base.fuse_lora()
    base.unload_lora_weights()
    base.vae = AutoencoderTiny.from_pretrained(args.decoder, dtype=torch.float32)
    base.vae.enable_slicing()
    base.vae.enable_tiling()
    # SDXL-Lightning's model card: Euler with trailing timesteps.
    base.scheduler = EulerDiscreteScheduler.from_config(
        base.scheduler.config, timestep_spacing="trailing"
    )
    auto = AutoPipelineForInpainting if case.mask else AutoPipelineForImage2Image
    pipe = auto.from_pipe(base)
    del base
    pipe.set_progress_bar_config(disable=True)
    load_seconds = time.perf_counter() - started
    image = Image.open(args.image).convert("RGB")
    inputs: dict[str, Any] = {"image": image, "strength": STRENGTH}
    if case.mask:
        mask = Image.open(args.mask).convert("L")
        inputs |= {
            "mask_image": pipe.mask_processor.blur(mask, blur_factor=MASK_BLUR),
            "width": image.width,
            "height": image.height,
        }
    wait_for_quiet(args)
    run = plain_request(pipe, inputs, Path(args.work) / f"plain-{case.name}.png")
    common.emit_child_result(run | {"load_seconds": load_seconds})
    return 0


def plain_request(pipe: Any, inputs: dict[str, Any], out: Path) -> dict[str, Any]:
    """One call, timed by stage (hooks on the UNet and the VAE's encoder), then its PNG."""
    import torch

    calls: list[float] = []
    image_encode: list[float] = []
    stamps: list[float] = []

    def step_end(_pipe: Any, _i: int, _t: Any, tensors: dict) -> dict:
        stamps.append(time.perf_counter())
        return tensors

    hooks = [
        pipe.unet.register_forward_pre_hook(lambda *_: calls.append(time.perf_counter())),
        pipe.vae.encoder.register_forward_pre_hook(
            lambda *_: image_encode.append(-time.perf_counter())
        ),
        pipe.vae.encoder.register_forward_hook(lambda *_: image_encode.append(time.perf_counter())),
    ]
    reset_peak()
    load = common.load_average()
    cpu = time.process_time()
    begun = time.perf_counter()
    try:
        with torch.inference_mode():
            image = pipe(
                prompt=PROMPT,
                num_inference_steps=PRESET["steps"],
                guidance_scale=PRESET["guidance"],
                generator=torch.Generator("cpu").manual_seed(SEED),
                callback_on_step_end=step_end,
                **inputs,
            ).images[0]
    finally:
        for hook in hooks:
            hook.remove()
    called = time.perf_counter()
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    with out.open("wb") as f:
        f.write(buffer.getvalue())
        f.flush()
        os.fsync(f.fileno())
    stored = time.perf_counter()
    return {
        "encode": calls[0] - begun,
        "denoise": stamps[-1] - calls[0],
        "decode": called - stamps[-1],
        "rest": stored - called,
        "total": stored - begun,
        "calls": len(calls),
        "cpu": time.process_time() - cpu,
        "peak_rss_bytes": common.proc_status_bytes("VmHWM"),
        "load": load,
        "image_encode": sum(image_encode),  # the VAE encoder's own seconds, within `encode`
        "png": str(out),
        "size": list(image.size),
    }


def run_plain(args: argparse.Namespace, source: Source, case: Case, work: Path) -> Run:
    inputs = work / "input.png", work / "mask.png"
    child_args = [
        "plain",
        "--case",
        case.name,
        "--model-path",
        str(source.model),
        "--lora",
        str(source.lora),
        "--decoder",
        str(source.decoder),
        "--image",
        str(inputs[0]),
        "--mask",
        str(inputs[1]),
        "--threads",
        str(args.threads),
        "--work",
        str(work),
        "--quiet-load",
        str(args.quiet_load),
        "--quiet-wait",
        str(args.quiet_wait),
    ]
    r = common.run_child(SCRIPT, child_args, work / f"plain-{case.name}.log", 7200, env={})
    return Run(
        case=case.name,
        variant="plain",
        encode=r["encode"],
        denoise=r["denoise"],
        decode=r["decode"],
        rest=r["rest"],
        total=r["total"],
        calls=r["calls"],
        cpu=r["cpu"],
        peak_rss_bytes=r["peak_rss_bytes"],
        load=r["load"],
        detail={k: r[k] for k in ("image_encode", "png", "size", "load_seconds")},
    )


# --- the service, one app per request ----------------------------------------------------------


def run_service(args: argparse.Namespace, model_dir: Path, case: Case, work: Path) -> Run:
    """One request to a fresh app of the shipped configuration."""
    env = service_env(model_dir, None, work, args.threads)
    app = service_app(SHIPPED, "sdxl", env, work / f"service-{case.name}.log")
    files: dict[str, tuple[str, bytes, str]] = {}
    if case.edit:
        files["image"] = ("input.png", (work / "input.png").read_bytes(), "image/png")
    if case.mask:
        files["mask"] = ("mask.png", (work / "mask.png").read_bytes(), "image/png")
    app.start(120)
    try:
        load_seconds = wait_ready(app, timeout=1800)
        pid = worker_pid(app)
        wait_for_quiet(args)
        reset_peak(pid)
        load = common.load_average()
        cpu = cpu_seconds(pid)
        started = time.perf_counter()
        response = requests.post(
            app.url("/generate"), data=case.form(args.size), files=files or None, timeout=7200
        )
        total = time.perf_counter() - started
        cpu = cpu_seconds(pid) - cpu
        if response.status_code != 200:
            raise RuntimeError(f"/generate: {response.status_code} {response.text[:300]}")
        peak = proc_bytes(pid, "VmHWM")
        job = requests.get(app.url(f"/jobs/{response.headers['X-Job-Id']}"), timeout=30).json()
    finally:
        app.stop()
    check_ran(case, response.headers, job)
    timings = job["image"]["timings"]
    png = work / f"service-{case.name}.png"
    png.write_bytes(response.content)
    stages = timings["encode_seconds"] + timings["denoise_seconds"] + timings["decode_seconds"]
    edit = job["image"]["parameters"].get("edit") or {}
    return Run(
        case=case.name,
        variant="service",
        encode=timings["encode_seconds"],
        denoise=timings["denoise_seconds"],
        decode=timings["decode_seconds"],
        rest=total - stages,
        total=total,
        calls=case.steps,
        cpu=cpu,
        peak_rss_bytes=peak,
        load=load,
        detail={
            "png": str(png),
            "load_seconds": load_seconds,
            "timings": timings,
            "only_masked": edit.get("only_masked"),
            "steps_run": edit.get("steps_run"),
            "size": [job["image"]["parameters"][k] for k in ("width", "height")],
        },
    )


def check_ran(case: Case, headers: Any, job: dict[str, Any]) -> None:
    """The service ran the shipped preset's settings, as an edit of the kind asked for:
    otherwise the figures would compare other work than plain diffusers'."""
    expected = {
        "X-Steps": str(case.steps),
        "X-Guidance": f"{PRESET['guidance']:g}",
        "X-Scheduler": PRESET["scheduler"],
    }
    ran = {header: headers.get(header) for header in expected}
    if ran != expected:
        raise RuntimeError(f"{case.name}: the service ran {ran}, not {expected}")
    edit = job["image"]["parameters"].get("edit")
    kind = None if edit is None else ("inpaint" if edit["mask"] else "img2img")
    wanted = None if not case.edit else ("inpaint" if case.mask else "img2img")
    if kind != wanted or bool(edit and edit.get("only_masked")) != case.only_masked:
        raise RuntimeError(f"{case.name}: the service ran {kind} ({edit}), not {wanted}")


# --- the report ----------------------------------------------------------------------------------


def comparisons(runs: list[Run]) -> list[dict[str, Any]]:
    """Each figure beside its baseline from the same run, with the ratio and the target."""
    by = {(r.case, r.variant): r for r in runs}
    rows = []

    def row(
        what: str, value: float, baseline: float, against: str, target: float, unit: str
    ) -> None:
        ratio = value / baseline
        rows.append(
            {
                "what": what,
                "value": value,
                "baseline": baseline,
                "against": against,
                "ratio": ratio,
                "target": target,
                "met": ratio <= target,
                "unit": unit,
            }
        )

    for name in WITH_PLAIN:
        service, plain = by.get((name, "service")), by.get((name, "plain"))
        if service and plain:
            for part in ("encode", "denoise", "decode", "rest"):
                row(
                    f"{name} {part}",
                    getattr(service, part),
                    getattr(plain, part),
                    "plain",
                    float("inf"),
                    "s",
                )
            row(f"{name} total", service.total, plain.total, "plain", TARGETS["edit_vs_plain"], "s")
    if text := by.get(("text_to_image", "service")):
        for name in ("img2img", "inpaint", "only_masked"):
            if edit := by.get((name, "service")):
                row(
                    f"{name} peak RSS",
                    edit.peak_rss_bytes / GIB,
                    text.peak_rss_bytes / GIB,
                    "service text-to-image",
                    TARGETS["peak_vs_text_to_image"],
                    "GiB",
                )
    inpaint, only = by.get(("inpaint", "service")), by.get(("only_masked", "service"))
    if inpaint and only:
        row(
            "only_masked total",
            only.total,
            inpaint.total,
            "service whole-image inpaint",
            TARGETS["only_masked_vs_inpaint"],
            "s",
        )
    return rows


def print_runs(runs: list[Run]) -> None:
    header = (
        f"{'request':<14} {'variant':<8} {'encode':>7} {'(VAE enc)':>9} "
        f"{'UNet calls x s':>15} {'decode':>7} {'rest':>6} {'total s':>8} {'CPU s':>6} "
        f"{'peak GiB':>8}"
    )
    print("\n" + header + "\n" + "-" * len(header))
    for r in runs:
        vae = r.detail.get("image_encode")
        print(
            f"{r.case:<14} {r.variant:<8} {r.encode:>7.2f} "
            f"{'' if vae is None else f'{vae:.2f}':>9} {f'{r.calls} x {r.per_call:.2f}':>15} "
            f"{r.decode:>7.2f} {r.rest:>6.2f} {r.total:>8.2f} {r.cpu:>6.0f} "
            f"{r.peak_rss_bytes / GIB:>8.2f}"
        )


def print_comparisons(rows: list[dict[str, Any]]) -> None:
    header = f"{'figure':<22} {'service':>9} {'baseline':>9} {'against':<28} {'ratio':>6} target"
    print("\n" + header + "\n" + "-" * len(header))
    for row in rows:
        target = (
            ""
            if row["target"] == float("inf")
            else (f"<= {row['target']:g}x {'met' if row['met'] else 'NOT met'}")
        )
        print(
            f"{row['what']:<22} {row['value']:>7.2f} {row['unit']:<3}"[:37].ljust(37)
            + f"{row['baseline']:>7.2f} {row['unit']:<3} {row['against']:<28} "
            f"{row['ratio']:>5.2f}x {target}"
        )


# --- the run -------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the tests' tiny SDXL: a smoke run")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="--quick at 64x64, img2img only (the service beside plain diffusers): proves the "
        "run end to end in the least time, measures nothing",
    )
    parser.add_argument("--hub", type=Path, default=QUICK_HUB, help="--quick: where its repos go")
    parser.add_argument("--cases", default=",".join(CASES), help=f"some of {','.join(CASES)}")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads")
    parser.add_argument(
        "--quiet-load",
        type=float,
        default=None,
        help="wait before each request until the 1-min load average is below "
        "this (0.5; --quick: no wait)",
    )
    parser.add_argument("--quiet-wait", type=float, default=300, help="waiting at most (300 s)")
    parser.add_argument("--force", action="store_true", help="run even if memory looks short")
    parser.add_argument("--json", type=Path, help="where to write results")
    parser.add_argument("--child", nargs=1, metavar="KIND", help=argparse.SUPPRESS)
    for name in ("case", "model-path", "lora", "decoder", "image", "mask", "work"):
        parser.add_argument(f"--{name}", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke:
        args.quick, args.cases = True, IMG2IMG.name
    if args.quiet_load is None:
        args.quiet_load = 1e9 if args.quick else 0.5
    unknown = set(args.cases.split(",")) - set(CASES)
    if unknown:
        parser.error(f"unknown cases {sorted(unknown)}; choose from {sorted(CASES)}")
    return args


def measure(args: argparse.Namespace, source: Source, work: Path) -> list[Run]:
    model_dir = work / "share"
    place_on_share(
        "sdxl",
        model_dir,
        adapters=tuple(parse_adapters(DEFAULT_MODEL_ADAPTERS)),
        tiny_decoder=True,
        repo_id=DEFAULT_MODEL_ID,
        source=source.model,
        hub_root=source.hub_root,
        decoder_source=source.decoder,
    )
    write_inputs(source.size, work)
    runs = []
    for name in args.cases.split(","):
        case = CASES[name]
        variants = ("service", "plain") if name in WITH_PLAIN else ("service",)
        for variant in variants:
            common.read_files(weight_files(source.model))  # page cache warm for each
            run = (
                run_service(args, model_dir, case, work)
                if variant == "service"
                else run_plain(args, source, case, work)
            )
            runs.append(run)
            print(
                f"  {run.case} {run.variant}: encode {run.encode:.1f} s | {run.calls} UNet "
                f"calls {run.denoise:.1f} s | decode {run.decode:.1f} s | rest {run.rest:.2f} "
                f"s | total {run.total:.1f} s | peak RSS {run.peak_rss_bytes / GIB:.2f} GiB",
                flush=True,
            )
    return runs


def run(args: argparse.Namespace) -> int:
    machine = common.machine_info()
    common.print_machine(machine, f"torch threads {args.threads}")
    source = quick_source(args.hub) if args.quick else full_source()
    if args.smoke:
        source = replace(source, size=SMOKE_SIDE)
    args.size = source.size
    fp32 = fp32_bytes(source.model)
    common.check_memory(int(1.3 * fp32) + 2 * GIB, args.force)
    print(
        f"\n== {source.name} at {source.size}x{source.size}, the shipped preset (4 steps, "
        f"guidance 0, trailing Euler, tiny decoder); strength {STRENGTH:g} | fp32 weights "
        f"{fp32 / GIB:.2f} GiB",
        flush=True,
    )
    work = scratch_dir("edit-")
    started = time.monotonic()
    try:
        runs = measure(args, source, work)
        by = {(r.case, r.variant): r for r in runs}
        differences = {
            name: image_difference(
                by[(name, "service")].detail["png"], by[(name, "plain")].detail["png"]
            )
            for name in ("img2img",)
            if (name, "service") in by and (name, "plain") in by
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = comparisons(runs)
    print_runs(runs)
    print_comparisons(rows)
    if differences:
        print(
            "service vs plain img2img image, mean |difference| (0-255): "
            + ", ".join(f"{v:.2f}" for v in differences.values())
        )
    verdicts = [
        f"{r['what']}: {r['ratio']:.2f}x (target <= {r['target']:g}x) "
        f"{'met' if r['met'] else 'NOT met'}"
        for r in rows
        if r["target"] != float("inf")
    ]
    summary = (
        f"summary: {source.name} {source.size}x{source.size}: "
        + "; ".join(verdicts)
        + f" | run took {time.monotonic() - started:.0f} s"
    )
    document = {
        "config": {
            "model": source.name,
            "size": source.size,
            "quick": args.quick,
            "smoke": args.smoke,
            "threads": args.threads,
            "prompt": PROMPT,
            "seed": SEED,
            "strength": STRENGTH,
            "mask": f"a centred {source.size // 4}x{source.size // 4} square, mask_blur "
            f"{MASK_BLUR}",
            "preset": PRESET,
            "edit_steps": EDIT_STEPS,
            "default_lora": f"random, as {DEFAULT_LORA_REPO}:{DEFAULT_LORA_FILE}",
            "tiny_decoder": "TAESDXL's architecture, random weights (the shipped default)",
            "fp32_bytes": fp32,
        },
        "runs": [asdict(r) for r in runs],
        "comparisons": [
            r | {"target": None if r["target"] == float("inf") else r["target"]} for r in rows
        ],
        "image_difference": differences,
        "verdicts": verdicts,
    }
    common.finish("edit_bench", machine, document, summary, args.json)
    return 0


def main(argv: list[str] | None = None) -> int:
    return common.main(parse_args, run, plain_child, argv)


if __name__ == "__main__":
    sys.exit(main())
