"""Time-to-image benchmark: one synchronous `POST /generate`, request to PNG bytes, at the
current defaults and on the fast path, beside plain diffusers called with the same settings.

Why it exists: clients send one request and wait, and Azure's ingress cuts it at 240 s. Per
step the service is at torch's floor (bench/step_bench.py), so what decides whether an SDXL
image fits is how much work an image takes: how many UNet calls, of what batch, and which
decoder. One run measures, on the full-size random-weight repos (bench/model_fixture.py; random
weights cost what real ones cost) at each model's native size:

- (a) `defaults`: the seed's defaults (guidance 7: CFG, UNet batch 2; the model's own
  scheduler), run at 2 steps and extrapolated to 20 from the measured time per UNet call
  (the full run would take half an hour per SDXL image);
- (b) `fast`: 4 steps, guidance 0 (no unconditional pass: batch 1), trailing Euler (what
  SDXL-Lightning's card prescribes), sent as form fields;
- (c) `fast + tiny decoder`: (b) with the full VAE decode replaced by a taesd/taesdxl decode.
  VAE_DECODER=tiny is not on main yet (the adapters branch), so the tiny decode is measured on
  its own: diffusers' AutoencoderTiny built from its default config (taesd's and taesdxl's
  architecture) with random weights, decoding a latent of the same size, postprocessing
  included; (c) = (b) - full decode + tiny decode. LoRA adapters are not on main either: no
  LoRA is fused (a fused LoRA costs nothing per step).

Each variant runs in its own process, one after the other (two SDXL pipelines do not fit):
the service is the real app under gunicorn (tests.support.processes.AppServer, DEVICE=cpu) with
the model placed on its share as a complete download (no pull: pull_bench times that) and
loaded before timing; plain diffusers is `from_pretrained(variant="fp16", dtype=float32)` in a
child with diffusers' defaults, timed from its call to the PNG written to disk. Each gets a
breakdown (text encoders, UNet steps, decode, PNG and store; for the service from its
record's stage timings, the rest of the client's time being HTTP, queue and store) and its peak
RSS during the request (VmHWM reset before it through /proc/<pid>/clear_refs), beside the fp32
size of the weights. Then the fast path runs again at 1 torch thread (SDXL: one step), so the
4 vCPU figures are projected from the measured 1 -> 2 thread scaling of each stage (assuming
2 -> 4 scales as 1 -> 2 did), not from an assumed linear speed-up.

Run it alone on the machine, under the lock the full-size benches share:

    flock /tmp/fullsize-bench.lock .venv/bin/python bench/time_to_image_bench.py   # both models
    flock /tmp/fullsize-bench.lock .venv/bin/python bench/time_to_image_bench.py --model sd15
    .venv/bin/python bench/time_to_image_bench.py --quick   # SD 1.5 at 256x256: a smoke run
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from bench.common import GIB, median  # noqa: E402
from bench.model_fixture import (  # noqa: E402
    MODELS,
    ensure_model,
    fp32_bytes,
    place_on_share,
    scratch_dir,
    spec_for,
    weight_files,
)
from tests.support.processes import AppServer  # noqa: E402

SCRIPT = Path(__file__).resolve()
PROMPT = "a photo of an astronaut riding a horse on the sea at sunset, detailed"
NEGATIVE = "blurry, low quality"
SEED = 42
NATIVE = {"sd15": 512, "sdxl": 1024}
SEED_DEFAULT_STEPS = 20  # GEN_DEFAULT_STEPS' fallback: what (a) is extrapolated to


@dataclass(frozen=True)
class Config:
    name: str
    steps: int
    guidance: float
    scheduler: str | None  # a name of imagegen.generation.schedulers; None: the model's own

    def form(self) -> dict[str, str]:
        """The form fields the service gets: (a) sends only its steps, so guidance and
        scheduler are the service's own defaults (no preset for the bench repos)."""
        fields = {
            "prompt": PROMPT,
            "negative_prompt": NEGATIVE,
            "seed": str(SEED),
            "steps": str(self.steps),
        }
        if self.name != "defaults":
            fields |= {"guidance": f"{self.guidance:g}", "scheduler": self.scheduler or ""}
        return fields


DEFAULTS = Config("defaults", steps=2, guidance=7.0, scheduler=None)
FAST = Config("fast", steps=4, guidance=0.0, scheduler="euler_trailing")
CONFIGS = {c.name: c for c in (DEFAULTS, FAST)}


@dataclass
class Run:
    """One request's figures. Stages in seconds; `calls` UNet calls of `batch`."""

    model: str
    config: str
    variant: str  # service | plain
    threads: int
    encode: float
    denoise: float
    decode: float
    png_store: float  # PNG encode and store; for the service also HTTP and queue
    total: float  # request to PNG bytes (service: at the client)
    calls: int
    batch: int
    peak_rss_bytes: int  # during the request
    cpu: float = 0.0  # CPU seconds of the process during the request (all its threads)
    calls_at_20: int = 0  # UNet calls of 20 steps with this scheduler
    load: str = ""  # the machine's load average when the request started
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def per_call(self) -> float:
        return self.denoise / self.calls

    def extrapolated(self, calls: int) -> float:
        """The same request with `calls` UNet calls instead of the measured ones."""
        return self.encode + self.per_call * calls + self.decode + self.png_store


# --- the plain diffusers child -----------------------------------------------------------------


def plain_scheduler(pipe: Any, name: str | None) -> Any:
    """The scheduler a plain diffusers user would set for the same settings."""
    if name is None:
        return pipe.scheduler
    from diffusers import EulerDiscreteScheduler

    assert name == "euler_trailing", name
    return EulerDiscreteScheduler.from_config(pipe.scheduler.config, timestep_spacing="trailing")


def reset_peak(pid: int | str = "self") -> None:
    """Resets VmHWM to the current RSS (Linux 4.0+), so the next read is this request's peak."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def plain_request(pipe: Any, config: Config, args: argparse.Namespace) -> dict[str, Any]:
    """One request of plain diffusers, timed by stage: its call (hooks on the UNet mark
    each call; the step-end callback the last step), then the PNG written to disk."""
    import torch

    counter = type(pipe.scheduler).from_config(pipe.scheduler.config)
    counter.set_timesteps(SEED_DEFAULT_STEPS)
    calls: list[list[float]] = []
    batches: list[int] = []
    stamps: list[float] = []

    def before(_module: Any, args_: tuple, kwargs: dict) -> None:
        batches.append((args_[0] if args_ else kwargs["sample"]).shape[0])
        calls.append([time.perf_counter(), 0.0])

    def after(*_: Any) -> None:
        calls[-1][1] = time.perf_counter()

    def step_end(_pipe: Any, _i: int, _t: Any, tensors: dict) -> dict:
        stamps.append(time.perf_counter())
        return tensors

    hooks = [
        pipe.unet.register_forward_pre_hook(before, with_kwargs=True),
        pipe.unet.register_forward_hook(after),
    ]
    reset_peak()
    load = common.load_average()
    cpu = time.process_time()
    begun = time.perf_counter()
    try:
        with torch.inference_mode():
            image = pipe(
                prompt=PROMPT,
                negative_prompt=NEGATIVE,
                num_inference_steps=args.steps or config.steps,
                guidance_scale=config.guidance,
                width=args.size,
                height=args.size,
                generator=torch.Generator("cpu").manual_seed(SEED),
                callback_on_step_end=step_end,
            ).images[0]
    finally:
        for hook in hooks:
            hook.remove()
    called = time.perf_counter()
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    out = Path(args.work) / f"plain-{args.model}-{config.name}-{args.threads}.png"
    with out.open("wb") as f:
        f.write(buffer.getvalue())
        f.flush()
        os.fsync(f.fileno())
    stored = time.perf_counter()
    return {
        "config": config.name,
        "cpu": time.process_time() - cpu,
        "load": load,
        "encode": calls[0][0] - begun,
        "denoise": stamps[-1] - calls[0][0],
        "decode": called - stamps[-1],
        "png_store": stored - called,
        "total": stored - begun,
        "calls": len(calls),
        "batch": max(batches),
        "call_seconds": [end - start for start, end in calls],
        "peak_rss_bytes": common.proc_status_bytes("VmHWM"),
        "png": str(out),
        "calls_at_20": len(counter.timesteps),
    }


def plain_child(args: argparse.Namespace) -> int:
    import torch
    from diffusers import DiffusionPipeline

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    pipe = DiffusionPipeline.from_pretrained(
        spec_for(args.model).path, variant="fp16", dtype=torch.float32
    )
    pipe.set_progress_bar_config(disable=True)
    load_seconds = time.perf_counter() - started
    load_peak = common.proc_status_bytes("VmHWM")
    own = pipe.scheduler
    runs = []
    for name in args.configs.split(","):
        config = CONFIGS[name]
        pipe.scheduler = plain_scheduler(pipe, config.scheduler)
        try:
            wait_for_quiet(args)
            runs.append(plain_request(pipe, config, args))
        finally:
            pipe.scheduler = own
    common.emit_child_result(
        {
            "runs": runs,
            "load_seconds": load_seconds,
            "load_peak_rss_bytes": load_peak,
            "torch_threads": torch.get_num_threads(),
        }
    )
    return 0


def tiny_child(args: argparse.Namespace) -> int:
    """The taesd/taesdxl decode of one latent of the size, postprocessing to PIL included
    (what a pipeline's decode stage does with VAE_DECODER=tiny), median of 3."""
    import torch
    from diffusers import AutoencoderTiny
    from diffusers.image_processor import VaeImageProcessor

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    vae = AutoencoderTiny().eval()  # the default config is taesd's and taesdxl's
    processor = VaeImageProcessor(vae_scale_factor=8)
    latents = torch.randn(1, 4, args.size // 8, args.size // 8)
    times = []
    for _ in range(3):
        started = time.perf_counter()
        with torch.inference_mode():
            decoded = vae.decode(latents / vae.config.scaling_factor).sample
            image = processor.postprocess(decoded, output_type="pil")[0]
        times.append(time.perf_counter() - started)
    common.emit_child_result(
        {
            "decode_seconds": median(times),
            "times": times,
            "image_size": list(image.size),
            "params": sum(p.numel() for p in vae.decoder.parameters()),
        }
    )
    return 0


def run_plain(
    args: argparse.Namespace,
    model: str,
    configs: list[str],
    work: Path,
    threads: int,
    steps: int | None = None,
) -> tuple[list[Run], dict[str, Any]]:
    child_args = [
        "plain",
        "--model",
        model,
        "--size",
        str(args.size_for[model]),
        "--threads",
        str(threads),
        "--configs",
        ",".join(configs),
        "--quiet-load",
        str(args.quiet_load),
        "--quiet-wait",
        str(args.quiet_wait),
        "--work",
        str(work),
    ] + (["--steps", str(steps)] if steps else [])
    result = common.run_child(SCRIPT, child_args, work / f"plain-{model}.log", timeout=7200, env={})
    runs = [
        Run(
            model=model,
            config=r["config"],
            variant="plain",
            threads=result["torch_threads"],
            encode=r["encode"],
            denoise=r["denoise"],
            decode=r["decode"],
            png_store=r["png_store"],
            total=r["total"],
            calls=r["calls"],
            batch=r["batch"],
            peak_rss_bytes=r["peak_rss_bytes"],
            cpu=r["cpu"],
            calls_at_20=r["calls_at_20"],
            load=r["load"],
            detail={"call_seconds": r["call_seconds"], "png": r["png"]},
        )
        for r in result["runs"]
    ]
    return runs, {
        "load_seconds": result["load_seconds"],
        "load_peak_rss_bytes": result["load_peak_rss_bytes"],
    }


# --- the service ------------------------------------------------------------------------------


def worker_pid(app: AppServer) -> int:
    """The gunicorn worker (the one child of the master), where the model lives."""
    assert app.process is not None
    pid = app.process.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def service_env(model_dir: Path, repo_id: str, work: Path, threads: int) -> dict[str, str]:
    return {
        "MODEL_ID": repo_id,
        "MODEL_DIR": str(model_dir),
        "DOWNLOAD_CACHE_DIR": str(work / "cache"),
        "OUTPUT_DIR": str(work / "images"),
        "HF_ENDPOINT": "http://127.0.0.1:9",  # the share is warm: the hub is never asked
        "DEVICE": "cpu",
        "TORCH_THREADS": str(threads),
        "PRELOAD_MODEL_CODE": "1",  # the service's default (the test AppServer turns it off)
        "GEN_SYNC_TIMEOUT": "7200",  # (a) at SDXL size takes longer than Azure's cut-off
        "GUNICORN_TIMEOUT": "7200",
        "MONGODB_URI": "mongodb://127.0.0.1:9/unused",  # the image API never touches it
        "LOG_LEVEL": "WARNING",
        **common.QUIET_ENV,
    }


def wait_ready(app: AppServer, timeout: float) -> float:
    started = time.monotonic()
    response = requests.post(app.url("/model/pull"), timeout=30)
    response.raise_for_status()
    while (status := requests.get(app.url("/model/status"), timeout=30).json())["state"] != "ready":
        if status["state"] == "failed" or time.monotonic() - started > timeout:
            raise RuntimeError(f"the model did not load: {status}\n{app.log_tail()}")
        time.sleep(0.5)
    return time.monotonic() - started


def run_service(
    args: argparse.Namespace, model: str, configs: list[str], work: Path
) -> tuple[list[Run], dict[str, Any]]:
    spec = spec_for(model)
    model_dir = work / "share"
    place_on_share(model, model_dir)
    env = service_env(model_dir, spec.repo_id, work, args.threads)
    app = AppServer(env, work / f"service-{model}.log").start(120)
    runs = []
    try:
        load_seconds = wait_ready(app, timeout=1800)
        pid = worker_pid(app)
        load_peak = proc_bytes(pid, "VmHWM")
        for name in configs:
            config = CONFIGS[name]
            fields = config.form() | {"size": f"{args.size_for[model]}x{args.size_for[model]}"}
            wait_for_quiet(args)
            reset_peak(pid)
            load = common.load_average()
            cpu = cpu_seconds(pid)
            started = time.perf_counter()
            response = requests.post(app.url("/generate"), data=fields, timeout=7200)
            total = time.perf_counter() - started
            cpu = cpu_seconds(pid) - cpu
            if response.status_code != 200:
                raise RuntimeError(f"/generate: {response.status_code} {response.text[:300]}")
            peak = proc_bytes(pid, "VmHWM")
            job = requests.get(app.url(f"/jobs/{response.headers['X-Job-Id']}"), timeout=30).json()
            timings = job["image"]["timings"]
            png = work / f"service-{model}-{name}.png"
            png.write_bytes(response.content)
            runs.append(
                Run(
                    model=model,
                    config=name,
                    variant="service",
                    threads=args.threads,
                    encode=timings["encode_seconds"],
                    denoise=timings["denoise_seconds"],
                    decode=timings["decode_seconds"],
                    png_store=total
                    - timings["encode_seconds"]
                    - timings["denoise_seconds"]
                    - timings["decode_seconds"],
                    total=total,
                    calls=job["progress"]["steps"],
                    batch=1 if float(response.headers["X-Guidance"]) <= 1 else 2,
                    peak_rss_bytes=peak,
                    cpu=cpu,
                    load=load,
                    detail={
                        "timings": timings,
                        "png": str(png),
                        "headers": {
                            h: response.headers.get(h)
                            for h in ("X-Steps", "X-Guidance", "X-Scheduler", "X-Adjusted")
                        },
                    },
                )
            )
            print_run(runs[-1], fp32_bytes(spec.path))
    finally:
        app.stop()
        shutil.rmtree(model_dir, ignore_errors=True)
    return runs, {"load_seconds": load_seconds, "load_peak_rss_bytes": load_peak}


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a process, all its threads (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_for_quiet(args: argparse.Namespace) -> None:
    """Waits (up to --quiet-wait seconds) until the 1-minute load average is below
    --quiet-load: on a shared machine other work slows whichever variant it meets, and the
    service and plain diffusers run minutes apart."""
    deadline = time.monotonic() + args.quiet_wait
    while os.getloadavg()[0] > args.quiet_load and time.monotonic() < deadline:
        time.sleep(5)


def proc_bytes(pid: int, name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return int(line.split()[1]) * 1024
    return 0


# --- the report -------------------------------------------------------------------------------


def print_run(run: Run, fp32: int) -> None:
    print(
        f"  {run.model} {run.config:<8} {run.variant:<7} {run.threads}t: encode "
        f"{run.encode:.1f} s | {run.calls} UNet calls (batch {run.batch}) x "
        f"{run.per_call:.1f} s = {run.denoise:.1f} s | decode {run.decode:.1f} s | PNG+store "
        f"{run.png_store:.2f} s | total {run.total:.1f} s (CPU {run.cpu:.0f} s) | peak RSS "
        f"{run.peak_rss_bytes / GIB:.2f} GiB ({run.peak_rss_bytes / fp32:.2f}x fp32) | load "
        f"{run.load}",
        flush=True,
    )


def image_difference(a: str, b: str) -> float:
    """Mean absolute difference of two PNGs' pixels, 0-255: the service and plain diffusers
    computed the same image (fp32 noise only) when this is near 0."""
    from PIL import Image, ImageChops, ImageStat

    with Image.open(a) as first, Image.open(b) as second:
        difference = ImageChops.difference(first.convert("RGB"), second.convert("RGB"))
        return sum(ImageStat.Stat(difference).mean) / 3


@dataclass
class Line:
    """One row of the table: a measured request, or one derived from measured ones."""

    label: str
    variant: str
    encode: float
    unet: str  # "4 x 61.2 (b1)"
    decode: float
    png_store: float
    total: float
    cpu: float | None = None
    peak: float | None = None  # x fp32


def measured(label: str, run: Run, fp32: int) -> Line:
    return Line(
        label, run.variant, run.encode, f"{run.calls} x {run.per_call:.1f} (b{run.batch})",
        run.decode, run.png_store, run.total, run.cpu, run.peak_rss_bytes / fp32,
    )  # fmt: skip


def lines_for(result: dict[str, Any]) -> list[Line]:
    fp32, tiny = result["fp32_bytes"], result["tiny_decode_seconds"]
    threads = max(r.threads for r in result["runs"])
    by = {(r.config, r.variant, r.threads): r for r in result["runs"]}
    lines = []
    for variant in ("service", "plain"):
        if run := by.get(("defaults", variant, threads)):
            lines.append(measured(f"(a) defaults, {run.calls} UNet calls", run, fp32))
            calls = run.calls_at_20 or by[("defaults", "plain", threads)].calls_at_20
            lines.append(Line(
                f"(a) defaults, {SEED_DEFAULT_STEPS} steps (extrapolated)", variant, run.encode,
                f"{calls} x {run.per_call:.1f} (b{run.batch})", run.decode, run.png_store,
                run.extrapolated(calls),
            ))  # fmt: skip
    for variant in ("service", "plain"):
        if run := by.get(("fast", variant, threads)):
            lines.append(measured(f"(b) fast, {run.calls} steps", run, fp32))
            lines.append(Line(
                "(c) fast + tiny decoder (computed)", variant, run.encode,
                f"{run.calls} x {run.per_call:.1f} (b{run.batch})", tiny, run.png_store,
                run.total - run.decode + tiny,
            ))  # fmt: skip
    if run := by.get(("fast", "plain", 1)):
        lines.append(measured(f"fast at 1 thread, {run.calls} steps", run, fp32))
    return lines


def print_table(result: dict[str, Any]) -> None:
    size = f"{result['size']}x{result['size']}"
    print(f"\n{result['model']} at {size}, fp32 weights {result['fp32_bytes'] / GIB:.2f} GiB")
    header = (
        f"{'configuration':<40} {'variant':<8} {'encode':>6} {'UNet calls x s':>18} "
        f"{'decode':>7} {'PNG+rest':>8} {'total s':>8} {'CPU s':>6} {'peak':>6}"
    )
    print(header)
    print("-" * len(header))
    for line in lines_for(result):
        print(
            f"{line.label:<40} {line.variant:<8} {line.encode:>6.1f} {line.unet:>18} "
            f"{line.decode:>7.1f} {line.png_store:>8.2f} {line.total:>8.1f} "
            f"{'' if line.cpu is None else f'{line.cpu:.0f}':>6} "
            f"{'' if line.peak is None else f'{line.peak:.2f}x':>6}"
        )


def scaling(one: Run, two: Run) -> dict[str, float]:
    """Speed-up from 1 to 2 threads of each stage (text encoders, one UNet call, decode)."""
    return {
        "encode": one.encode / two.encode,
        "unet_call": one.per_call / two.per_call,
        "decode": one.decode / two.decode,
    }


def projected_4(run: Run, speedup: dict[str, float], *, calls: int | None = None,
                decode: float | None = None) -> float:  # fmt: skip
    """The request at 4 threads if 2 -> 4 scales as 1 -> 2 did; PNG, store and HTTP are
    single-threaded and stay."""
    calls = run.calls if calls is None else calls
    decode = run.decode if decode is None else decode
    return (
        run.encode / speedup["encode"]
        + run.per_call * calls / speedup["unet_call"]
        + decode / speedup["decode"]
        + run.png_store
    )


def verdicts_for(result: dict[str, Any], threads: int) -> list[str]:
    """The issue's targets, each with its figure: met or not."""
    model, fp32, tiny = result["model"], result["fp32_bytes"], result["tiny_decode_seconds"]
    by = {(r.config, r.variant, r.threads): r for r in result["runs"]}
    out = []

    def check(what: str, value: float, limit: float, unit: str) -> None:
        met = "met" if value <= limit else "NOT met"
        out.append(f"{model} {what}: {value:.2f}{unit} (target <= {limit:g}{unit}) {met}")

    for name in CONFIGS:
        service, plain = by.get((name, "service", threads)), by.get((name, "plain", threads))
        if service and plain:
            check(f"{name}: service / plain, wall", service.total / plain.total, 1.05, "x")
            out[-1] += f"; CPU {service.cpu / plain.cpu:.2f}x"
    peaks = [r.peak_rss_bytes for r in result["runs"] if r.variant == "service"]
    check("service peak RSS in a request / fp32 weights", max(peaks) / fp32, 1.15, "x")
    fast = by.get(("fast", "service", threads))
    if model == "sdxl" and fast:
        check(f"fast path, full decoder, {threads} vCPU", fast.total, 240, " s")
        check(f"fast path, tiny decoder, {threads} vCPU", fast.total - fast.decode + tiny, 180,
              " s")  # fmt: skip
        if speedup := result["speedup_1_to_2"]:
            check("fast path, full decoder, 4 vCPU projected", projected_4(fast, speedup), 200,
                  " s")  # fmt: skip
            check("fast path, tiny decoder, 4 vCPU projected",
                  projected_4(fast, speedup, decode=tiny), 120, " s")  # fmt: skip
    return out


# --- the run -----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="both", choices=[*sorted(MODELS), "both"])
    parser.add_argument("--configs", default="defaults,fast", help="defaults,fast (both)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads")
    parser.add_argument("--no-scaling", action="store_true", help="skip the 1-thread run")
    parser.add_argument(
        "--quiet-load",
        type=float,
        default=0.5,
        help="wait before each request until the 1-min load average is below this (0.5)",
    )
    parser.add_argument(
        "--quiet-wait", type=float, default=600, help="waiting for that at most (600 s)"
    )
    parser.add_argument("--quick", action="store_true", help="SD 1.5 at 256x256: a smoke run")
    parser.add_argument("--force", action="store_true", help="run even if memory looks short")
    parser.add_argument("--json", type=Path, help="where to write results")
    parser.add_argument("--child", nargs=1, metavar="KIND", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return args
    args.models = (
        ["sd15"] if args.quick else (["sd15", "sdxl"] if args.model == "both" else [args.model])
    )
    args.size_for = {m: NATIVE[m] // 2 if args.quick else NATIVE[m] for m in args.models}
    unknown = set(args.configs.split(",")) - set(CONFIGS)
    if unknown:
        parser.error(f"unknown configs {sorted(unknown)}; choose from {sorted(CONFIGS)}")
    return args


def measure_model(args: argparse.Namespace, model: str, work: Path) -> dict[str, Any]:
    spec = spec_for(model)
    ensure_model(model)
    fp32 = fp32_bytes(spec.path)
    common.check_memory(int(1.3 * fp32) + 2 * GIB, args.force)
    configs = args.configs.split(",")
    side = args.size_for[model]
    print(
        f"\n== {spec.repo_id} at {side}x{side}: {', '.join(configs)} "
        f"| fp32 weights {fp32 / GIB:.2f} GiB",
        flush=True,
    )
    primed = common.prime_size(int(1.5 * fp32))
    print(f"  primed {primed / GIB:.1f} GiB in {common.prime_memory(primed):.1f} s", flush=True)
    common.read_files(weight_files(spec.path))  # page cache warm for both variants
    service, service_load = run_service(args, model, configs, work)
    common.read_files(weight_files(spec.path))
    plain, plain_load = run_plain(args, model, configs, work, args.threads)
    for run in plain:
        print_run(run, fp32)
    runs = service + plain
    tiny = common.run_child(
        SCRIPT,
        ["tiny", "--size", str(side), "--threads", str(args.threads)],
        work / "tiny.log",
        timeout=600,
        env={},
    )
    print(
        f"  tiny decoder (AutoencoderTiny, random weights, {tiny['params'] / 1e6:.1f} M decoder "
        f"params): {tiny['decode_seconds']:.2f} s for {side}x{side}",
        flush=True,
    )
    speedup = None
    if not args.no_scaling and "fast" in configs and args.threads == 2:
        one_steps = 1 if model == "sdxl" else None  # SDXL: one step is enough for per call
        one, _ = run_plain(args, model, ["fast"], work, 1, steps=one_steps)
        print_run(one[0], fp32)
        runs += one
        two = next(r for r in plain if r.config == "fast")
        speedup = scaling(one[0], two)
        gains = ", ".join(f"{stage} {gain:.2f}x" for stage, gain in speedup.items())
        print(f"  1 -> 2 threads speed-up: {gains}", flush=True)
    differences = {
        name: image_difference(s.detail["png"], p.detail["png"])
        for name in configs
        for s in service
        for p in plain
        if s.config == p.config == name
    }
    return {
        "model": model,
        "size": side,
        "fp32_bytes": fp32,
        "runs": runs,
        "tiny_decode_seconds": tiny["decode_seconds"],
        "speedup_1_to_2": speedup,
        "service_load": service_load,
        "plain_load": plain_load,
        "image_difference": differences,
    }


def summary_for(result: dict[str, Any], threads: int) -> str:
    by = {(r.config, r.variant, r.threads): r for r in result["runs"]}
    tiny, parts = result["tiny_decode_seconds"], []
    if fast := by.get(("fast", "service", threads)):
        parts.append(
            f"fast {fast.total:.0f} s (tiny decoder {fast.total - fast.decode + tiny:.0f} s)"
        )
        if speedup := result["speedup_1_to_2"]:
            parts.append(
                f"4 vCPU projected {projected_4(fast, speedup):.0f} s "
                f"({projected_4(fast, speedup, decode=tiny):.0f} s)"
            )
    if defaults := by.get(("defaults", "service", threads)):
        calls = by[("defaults", "plain", threads)].calls_at_20
        parts.append(f"defaults at {SEED_DEFAULT_STEPS} steps {defaults.extrapolated(calls):.0f} s")
    return f"{result['model']} {result['size']}x{result['size']}: " + ", ".join(parts)


def run(args: argparse.Namespace) -> int:
    machine = common.machine_info()
    common.print_machine(machine, f"torch threads {args.threads}")
    print(
        "no LoRA fused (MODEL_ADAPTERS loading is not on main); tiny decoder measured on its "
        "own (VAE_DECODER=tiny is not on main)",
        flush=True,
    )
    work = scratch_dir("time-to-image-")
    started = time.monotonic()
    try:
        results = [measure_model(args, model, work) for model in args.models]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    verdicts, summaries = [], []
    for result in results:
        print_table(result)
        if speedup := result["speedup_1_to_2"]:
            gains = ", ".join(f"{stage} {gain:.2f}x" for stage, gain in speedup.items())
            print(f"1 -> 2 threads speed-up (fast path): {gains}")
        differences = ", ".join(f"{k} {v:.2f}" for k, v in result["image_difference"].items())
        print(f"service vs plain image, mean |difference| (0-255): {differences}")
        verdicts += verdicts_for(result, args.threads)
        summaries.append(summary_for(result, args.threads))
    print()
    for verdict in verdicts:
        print("  " + verdict)
    summary = (
        f"summary: {'; '.join(summaries)} at {args.threads} threads"
        f" | run took {time.monotonic() - started:.0f} s"
    )
    document = {
        "machine": machine | {"load_average_at_end": common.load_average()},
        "config": {
            "models": args.models, "configs": args.configs, "threads": args.threads,
            "quick": args.quick, "prompt": PROMPT, "negative_prompt": NEGATIVE, "seed": SEED,
            "lora": None, "tiny_decoder": "AutoencoderTiny, random weights, measured alone",
        },
        "results": [
            r | {"runs": [asdict(x) for x in r["runs"]],
                 "table": [asdict(x) for x in lines_for(r)]}
            for r in results
        ],
        "verdicts": verdicts,
        "summary": summary,
    }  # fmt: skip
    written = common.write_json("time_to_image", document, args.json)
    print(f"\nresults written to {written}")
    print(summary)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return {"plain": plain_child, "tiny": tiny_child}[args.child[0]](args)
    common.install_signal_handlers()
    try:
        return run(args)
    except common.Interrupted:
        print(
            "\ninterrupted; the app, the children and temp files were cleaned up", file=sys.stderr
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
