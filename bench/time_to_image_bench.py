"""Time-to-image benchmark: one synchronous `POST /generate`, request to PNG bytes, at the
current defaults and on the fast path, beside plain diffusers called with the same settings.

Why it exists: clients send one request and wait, and Azure's ingress cuts it at 240 s. Per
step the service is at torch's floor (bench/step_bench.py), so what decides whether an SDXL
image fits is how much work an image takes: how many UNet calls, of what batch, and which
decoder. One run measures, on the full-size random-weight repos (bench/model_fixture.py; random
weights cost what real ones cost) at each model's native size:

- (a) `defaults`: the base model at the service's defaults (guidance 7: CFG, UNet batch 2;
  the model's own scheduler), run at 2 steps and extrapolated to 20 from the measured time
  per UNet call (the full run would take a quarter of an hour per SDXL image);
- (b) `fast`: the model with an LCM-LoRA (MODEL_ADAPTERS; a random LoRA of the published
  one's rank, layers and size, fused at load) and only a prompt sent: the service's
  model-following defaults give 4 steps, guidance 1 (no unconditional pass: batch 1) and LCM;
- (c) `fast_tiny`: (b) with VAE_DECODER=tiny (taesd/taesdxl's architecture, random weights);
- (d) `shipped` (SDXL only): the service as it ships, nothing configured: MODEL_ID and
  MODEL_ADAPTERS unset (the random SDXL placed on the share as the default MODEL_ID, with a
  random LoRA of SDXL-Lightning's 4-step rank, layers and size as its file), and only a
  prompt sent: the default LoRA's preset gives 4 steps, guidance 0 and trailing Euler, at
  the model's own size and a seed the service draws (plain diffusers is given the same seed,
  read from the service's record), decoded by VAE_DECODER's default for it, TAESDXL (its
  architecture with random weights, on the share as the pull places it).

Each variant runs in its own process, one after the other (two SDXL pipelines do not fit): the
service is the real app under gunicorn (tests.support.processes.AppServer, DEVICE=cpu), one app
per configuration (its settings differ), with the model, the LoRA and the tiny decoder placed
on its share as a complete download (no pull: pull_bench times that) and loaded before timing;
plain diffusers is one child: `from_pretrained(variant="fp16", dtype=float32)`, then
`load_lora_weights` + `fuse_lora` for (b), `AutoencoderTiny` as its VAE for (c), the same
scheduler, steps, guidance, size and seed, timed from its call to the PNG written to disk. Each
request gets a breakdown (text encoders, UNet steps, decode, PNG and store; for the service
from its record's stage timings, the rest of the client's time being PNG, HTTP, queue and
store), its process's CPU seconds (steadier than wall time on a shared machine), the kernel's
share of them and the minor page faults taken (memory handed back and faulted in again shows
there: imagegen/model/malloc_arena.py) and its peak RSS (VmHWM reset before it through
/proc/<pid>/clear_refs), beside the fp32 size of the weights. Before each configuration's first
request the run waits (at most --quiet-wait) for the machine's load average to drop below
--quiet-load. Then (b) runs again at 1 torch thread (SDXL: one step), so the 4 vCPU figures are
projected from the measured 1 -> 2 thread scaling of each stage (assuming 2 -> 4 scales as 1 ->
2 did), not from an assumed speed-up.

Run it alone on the machine, under the lock the full-size benches share:

    flock /tmp/fullsize-bench.lock .venv/bin/python bench/time_to_image_bench.py --model sdxl
    flock /tmp/fullsize-bench.lock .venv/bin/python bench/time_to_image_bench.py --model sd15
    .venv/bin/python bench/time_to_image_bench.py --quick   # SD 1.5 at 256x256: a smoke run

On a quiet 2 vCPU machine SDXL takes about 35 minutes (--configs fast,fast_tiny about 20),
SD 1.5 about 5; `--model sdxl --configs shipped --no-scaling` about 15 (two runs: 14 and 18).

Two more configurations, only when named in --configs (SDXL): (e) `hyper1`, Hyper-SD's 1-step
SDXL LoRA (a random LoRA under its repo and file) with its preset's TCD, and (f) `turbo`,
SDXL-Turbo (the random SDXL as its MODEL_ID) at its native 512x512, each with the tiny
decoder. `--steps N` runs every configuration at N steps on both sides (a UNet call costs
the same at any count, so `--steps 1` answers the per-part questions in a fraction of the
time), `--vae-tile N` decodes in tiles of N pixels on both sides (VAE_TILE_SIZE):

    flock /tmp/fullsize-bench.lock .venv/bin/python bench/time_to_image_bench.py --model sdxl \
        --configs turbo,hyper1,fast --steps 1 --no-scaling     # about 15 minutes

`--model ssd1b` runs the same configurations on SSD-1B's UNet (bench/model_fixture.py: built
from its published layer counts) with SDXL's text encoders and VAE, its LCM-LoRA and TAESDXL.

`--repeat N` sends each configuration N requests on each side (one app, one child) and reports
each figure's median (the 1-thread run's requests too): the text encoders' second moved by up to
1.2 s from one request to the next.

    flock /tmp/fullsize-bench.lock .venv/bin/python bench/time_to_image_bench.py --model sdxl \
        --configs turbo --steps 1 --no-scaling --repeat 5      # about 8 minutes

`--neighbour` runs the bench's own one-core busy loop (a process in a session of its own, as
another program on the machine) beside each side's requests, and the wait for a quiet machine
leaves it out; each request's load average is recorded either way:

    .venv/bin/python bench/time_to_image_bench.py --quick --configs defaults,fast --repeat 5 \
        --neighbour --no-scaling

Beside the seconds, the efficiency table: each part's FLOPs (bench.efficiency; the full
decode as its tiles run it), achieved FLOP/s and the fraction of this run's measured peak.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common, efficiency  # noqa: E402
from bench.common import GIB  # noqa: E402
from bench.model_fixture import (  # noqa: E402
    DEFAULT_LORA_FILE,
    DEFAULT_LORA_REPO,
    LCM_LORAS,
    LORA_FILE,
    MODELS,
    ensure_default_lora,
    ensure_lora,
    ensure_model,
    ensure_named_lora,
    ensure_tiny_decoder,
    fp32_bytes,
    place_on_share,
    scratch_dir,
    spec_for,
    weight_files,
)
from imagegen.model.adapters import (  # noqa: E402
    DEFAULT_MODEL_ADAPTERS,
    DEFAULT_MODEL_ID,
    parse_adapters,
)
from tests.support.processes import AppServer  # noqa: E402

SCRIPT = Path(__file__).resolve()
PROMPT = "a photo of an astronaut riding a horse on the sea at sunset, detailed"
NEGATIVE = "blurry, low quality"
SEED = 42
NATIVE = {"sd15": 512, "sdxl": 1024, "ssd1b": 1024}
SEED_DEFAULT_STEPS = 20  # GEN_DEFAULT_STEPS' fallback: what (a) is extrapolated to
VAE_TILE = 512  # --vae-tile's default: the full decoder's tiles on both sides (VAE_TILE_SIZE)
SYNC_TIMEOUT = 230  # GEN_SYNC_TIMEOUT's default: the shipped default's image must fit in it
# The settings whose absence makes the shipped default (config/settings.py): left out of the
# shipped configuration's service even when this shell has them.
SHIPPED_UNSET = (
    "MODEL_ID", "MODEL_REVISION", "MODEL_VARIANT", "MODEL_ADAPTERS", "VAE_DECODER",
    "VAE_DECODER_REPO", "VAE_TILE_SIZE", "GEN_FOLLOW_MODEL", "GEN_DEFAULT_STEPS",
    "GEN_DEFAULT_GUIDANCE", "GEN_DEFAULT_SCHEDULER",
)  # fmt: skip


@dataclass(frozen=True)
class Config:
    name: str
    steps: int
    guidance: float
    scheduler: str | None  # the plain side's scheduler; None: the model's own
    lora: bool = False  # MODEL_ADAPTERS: the model's LCM-LoRA
    tiny: bool = False  # VAE_DECODER=tiny (for `shipped`, its default: never set)
    shipped: bool = False  # nothing configured: the default model and its default LoRA
    adapter: str | None = None  # MODEL_ADAPTERS: another LoRA (repo:file), random weights
    repo_id: str | None = None  # MODEL_ID the random model stands for (a distilled model)
    side: int | None = None  # the image's side; None: the model's native size

    def form(self, size: int, steps: int | None = None) -> dict[str, str]:
        """What the service is sent: (a) only its steps (guidance and scheduler are the
        service's defaults: no preset for the base repos); the others only the prompt, so
        the adapter's or model's preset decides steps, guidance and scheduler, with a
        negative prompt, a seed and the size; (d) the prompt alone. `steps` (--steps, a
        shorter run) is sent to every configuration."""
        asked = {"steps": str(steps)} if steps else {}
        if self.shipped:
            return {"prompt": PROMPT} | asked
        fields = {"prompt": PROMPT, "negative_prompt": NEGATIVE, "seed": str(SEED),
                  "size": f"{size}x{size}"}  # fmt: skip
        if self.name == "defaults" and not asked:
            asked = {"steps": str(self.steps)}
        return fields | asked

    def service_env(self, model: str) -> dict[str, str]:
        if self.shipped:
            return {}
        env = {"VAE_DECODER": "tiny" if self.tiny else "full"}
        if self.lora:
            env["MODEL_ADAPTERS"] = f"{LCM_LORAS[model]}:{LORA_FILE}"
        if self.adapter:
            env["MODEL_ADAPTERS"] = self.adapter
        return env

    def adapters(self, model: str) -> tuple:
        """The LoRAs on the share: the LCM-LoRA MODEL_ADAPTERS names, or the default one."""
        if self.shipped:
            return parse_adapters(DEFAULT_MODEL_ADAPTERS)
        return parse_adapters(self.service_env(model).get("MODEL_ADAPTERS", ""))

    def expected_headers(self, steps: int | None = None) -> dict[str, str]:
        """What the service must report having run, so both sides ran the same thing."""
        from imagegen.generation.schedulers import SCHEDULERS

        steps = steps or self.steps
        if self.name == "defaults":
            return {"X-Steps": str(steps), "X-Guidance": "7"}
        # X-Scheduler: A1111's name for the table's scheduler (`lcm`: "LCM").
        return {"X-Steps": str(steps), "X-Guidance": f"{self.guidance:g}",
                "X-Scheduler": SCHEDULERS[str(self.scheduler)].a1111_name}  # fmt: skip


DEFAULTS = Config("defaults", steps=2, guidance=7.0, scheduler=None)
FAST = Config("fast", steps=4, guidance=1.0, scheduler="lcm", lora=True)
FAST_TINY = Config("fast_tiny", steps=4, guidance=1.0, scheduler="lcm", lora=True, tiny=True)
# The shipped preset decodes with TAESDXL (imagegen.model.decoder.default_decoder): `tiny`
# places it on the share and gives plain diffusers the same decoder; the service is told nothing.
SHIPPED = Config(
    "shipped", steps=4, guidance=0.0, scheduler="euler_trailing", tiny=True, shipped=True
)
# The one-step recipes (docs/performance.md, "Fast images"), each through its own preset and
# with the tiny decoder: Hyper-SD's 1-step SDXL LoRA (a random LoRA under its repo and file;
# fused, its rank costs nothing per step) at SDXL's size, and SDXL-Turbo (the random SDXL
# as MODEL_ID stabilityai/sdxl-turbo: the same architecture) at its native 512x512.
HYPER_SD_1STEP = "ByteDance/Hyper-SD:Hyper-SDXL-1step-lora.safetensors"
HYPER1 = Config("hyper1", steps=1, guidance=0.0, scheduler="tcd", tiny=True,
                adapter=HYPER_SD_1STEP)  # fmt: skip
TURBO = Config("turbo", steps=1, guidance=0.0, scheduler="euler_a_trailing", tiny=True,
               repo_id="stabilityai/sdxl-turbo", side=512)  # fmt: skip
CONFIGS = {c.name: c for c in (DEFAULTS, FAST, FAST_TINY, SHIPPED, HYPER1, TURBO)}
LABELS = {
    "defaults": "(a) defaults",
    "fast": "(b) LCM-LoRA, 4 steps, guidance 1",
    "fast_tiny": "(c) (b) + tiny decoder",
    "shipped": "(d) shipped: Lightning LoRA, a prompt",
    "hyper1": "(e) Hyper-SD 1-step LoRA, TCD, tiny decoder",
    "turbo": "(f) SDXL-Turbo 512x512, tiny decoder",
}
SDXL_ONLY = {"shipped", "hyper1", "turbo"}  # SDXL's default model and recipes
DEFAULT_CONFIGS = ("defaults", "fast", "fast_tiny", "shipped")  # the others: --configs


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
    # Of those, the kernel's, and the minor page faults taken meanwhile: memory handed back
    # to the kernel and faulted in again shows here (imagegen/model/malloc_arena.py).
    kernel_cpu: float = 0.0
    minor_faults: int = 0
    calls_at_20: int = 0  # UNet calls of 20 steps with this scheduler
    load: str = ""  # the machine's load average when the request started
    side: int = 0  # the image's side; 0: the model's (the run's) size
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def per_call(self) -> float:
        return self.denoise / self.calls

    def extrapolated(self, calls: int) -> float:
        """The same request with `calls` UNet calls instead of the measured ones."""
        return self.encode + self.per_call * calls + self.decode + self.png_store


# --- the plain diffusers child -----------------------------------------------------------------


def plain_lora(config: Config, model: str) -> tuple[Path, str] | None:
    """(folder, file) of the LoRA plain diffusers fuses for the configuration, if any."""
    if config.shipped:
        return ensure_default_lora().parent, DEFAULT_LORA_FILE
    if config.lora:
        return ensure_lora(model).parent, LORA_FILE
    if config.adapter:
        (adapter,) = parse_adapters(config.adapter)
        return ensure_named_lora(adapter.repo, adapter.file).parent, adapter.file
    return None


def prepare_plain(
    pipe: Any, config: Config, model: str, full_vae: Any, tile: int = VAE_TILE
) -> None:
    """Plain diffusers set up as a user of its documentation would for the same settings:
    the LoRA loaded, fused and unloaded (once; kept for the later configurations, so one
    child fuses one LoRA at most: `plain_groups`), the tiny autoencoder as the VAE, the VAE
    in slicing and tiles as the service has it, and the scheduler from the model's config
    (SDXL-Lightning's model card: Euler with trailing timesteps)."""
    from diffusers import (
        AutoencoderTiny,
        EulerAncestralDiscreteScheduler,
        EulerDiscreteScheduler,
        LCMScheduler,
        TCDScheduler,
    )

    lora = plain_lora(config, model)
    fused = getattr(pipe, "_bench_lora_fused", None)
    if lora is not None and fused is None:
        pipe.load_lora_weights(lora[0], weight_name=lora[1])
        pipe.fuse_lora()
        pipe.unload_lora_weights()
        pipe._bench_lora_fused = fused = lora
    assert lora is None or fused == lora, f"{config.name}: {fused} fused before {lora}"
    pipe.vae = (
        AutoencoderTiny.from_pretrained(ensure_tiny_decoder(model)) if config.tiny else (full_vae)
    )
    # The seed's VAE settings, as the service has them: slicing and tiling, the full VAE in
    # the tiles the service is given (--vae-tile as VAE_TILE_SIZE; diffusers' attributes; at
    # 1024x1024 SDXL's own tile is the whole image, 3.9 GiB of activations).
    pipe.vae.enable_slicing()
    pipe.vae.enable_tiling()
    if not config.tiny:
        scale = 2 ** (len(pipe.vae.config.block_out_channels) - 1)
        tile = min(tile, pipe.vae.tile_sample_min_size)  # as decode_in_tiles_of: never larger
        pipe.vae.tile_sample_min_size, pipe.vae.tile_latent_min_size = tile, tile // scale
    if config.scheduler == "lcm":
        pipe.scheduler = LCMScheduler.from_config(pipe.scheduler.config)
    elif config.scheduler == "euler_trailing":
        pipe.scheduler = EulerDiscreteScheduler.from_config(
            pipe.scheduler.config, timestep_spacing="trailing"
        )
    elif config.scheduler == "tcd":  # Hyper-SD's model card for its 1-step LoRA
        pipe.scheduler = TCDScheduler.from_config(pipe.scheduler.config)
    elif config.scheduler == "euler_a_trailing":  # SDXL-Turbo's model card
        pipe.scheduler = EulerAncestralDiscreteScheduler.from_config(
            pipe.scheduler.config, timestep_spacing="trailing"
        )
    else:
        assert config.scheduler is None, config.scheduler


def reset_peak(pid: int | str = "self") -> None:
    """Resets VmHWM to the current RSS (Linux 4.0+), so the next read is this request's peak."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def plain_request(
    pipe: Any, config: Config, args: argparse.Namespace, seed: int = SEED
) -> dict[str, Any]:
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
    counters = process_counters("self")
    begun = time.perf_counter()
    try:
        with torch.inference_mode():
            image = pipe(
                prompt=PROMPT,
                negative_prompt=None if config.shipped else NEGATIVE,
                num_inference_steps=args.steps or config.steps,
                guidance_scale=config.guidance,
                width=config.side or args.size,
                height=config.side or args.size,
                generator=torch.Generator("cpu").manual_seed(seed),
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
        **counted_since("self", counters),
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
        "side": config.side or args.size,
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
    own, full_vae = pipe.scheduler, pipe.vae
    seeds = dict(pair.split("=") for pair in args.seeds.split(",")) if args.seeds else {}
    runs = []
    for name in args.configs.split(","):
        config = CONFIGS[name]
        prepare_plain(pipe, config, args.model, full_vae, args.vae_tile)
        wait_for_quiet(args)
        with neighbour(args.neighbour):
            samples = [plain_request(pipe, config, args, int(seeds.get(name, SEED)))
                       for _ in range(args.repeat)]  # fmt: skip
        runs.append(samples[-1] | medians(samples) | {
            "peak_rss_bytes": max(sample["peak_rss_bytes"] for sample in samples),
            "samples": [{key: sample[key] for key in (*SAMPLED, "load")} for sample in samples],
        })  # fmt: skip
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


def run_plain(
    args: argparse.Namespace,
    model: str,
    configs: list[str],
    work: Path,
    threads: int,
    steps: int | None = None,
    seeds: dict[str, int] | None = None,
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
        "--vae-tile",
        str(args.vae_tile),
        "--repeat",
        str(args.repeat),
    ] + (["--steps", str(steps)] if steps else [])
    if args.neighbour:
        child_args.append("--neighbour")
    if seeds:
        child_args += ["--seeds", ",".join(f"{name}={seed}" for name, seed in seeds.items())]
    log = work / f"plain-{model}-{'-'.join(configs)}-{threads}.log"
    result = common.run_child(SCRIPT, child_args, log, timeout=7200, env={})
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
            kernel_cpu=r["kernel_cpu"],
            minor_faults=r["minor_faults"],
            calls_at_20=r["calls_at_20"],
            load=r["load"],
            side=r["side"],
            detail={"call_seconds": r["call_seconds"], "png": r["png"], "samples": r["samples"]},
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


def service_env(model_dir: Path, repo_id: str | None, work: Path, threads: int) -> dict[str, str]:
    """The bench's settings for one app; `repo_id` None leaves MODEL_ID at its default."""
    return {
        **({"MODEL_ID": repo_id} if repo_id else {}),
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


def service_app(config: Config, model: str, env: dict[str, str], log: Path) -> AppServer:
    """The app (not started) for one configuration: the bench's settings and the
    configuration's; for the shipped one, none of the settings that decide the defaults,
    whatever this shell sets."""
    app = AppServer(env | config.service_env(model), log)
    if config.shipped:
        for key in SHIPPED_UNSET:
            app.env.pop(key, None)
    return app


def wait_ready(app: AppServer, timeout: float) -> float:
    started = time.monotonic()
    response = requests.post(app.url("/model/pull"), timeout=30)
    response.raise_for_status()
    while (status := requests.get(app.url("/model/status"), timeout=30).json())["state"] != "ready":
        if status["state"] == "failed" or time.monotonic() - started > timeout:
            raise RuntimeError(f"the model did not load: {status}\n{app.log_tail()}")
        time.sleep(0.5)
    return time.monotonic() - started


# UNet calls beyond the steps asked for, by the sampler a record names: PNDM as SD 1.5 ships it
# (A1111's "PLMS") warms up with one more call; the service's progress counts the steps asked.
EXTRA_CALLS = {"PLMS": 1}


def unet_calls(job: dict[str, Any]) -> int:
    steps = job["image"]["parameters"]["steps"]
    return steps + EXTRA_CALLS.get(job["image"]["parameters"]["scheduler"], 0)


def service_request(
    app: AppServer, pid: int, config: Config, model: str, args: argparse.Namespace
) -> dict[str, Any]:
    """One request's figures (SAMPLED), its job record and its response."""
    counters = process_counters(pid)
    started = time.perf_counter()
    response = requests.post(
        app.url("/generate"),
        data=config.form(side_of(config, model, args), args.steps),
        timeout=7200,
    )
    total = time.perf_counter() - started
    spent = counted_since(pid, counters)
    if response.status_code != 200:
        raise RuntimeError(f"/generate: {response.status_code} {response.text[:300]}")
    job = requests.get(app.url(f"/jobs/{response.headers['X-Job-Id']}"), timeout=30).json()
    timings = job["image"]["timings"]
    stages = sum(timings[f"{stage}_seconds"] for stage in ("encode", "denoise", "decode"))
    return {
        "encode": timings["encode_seconds"], "denoise": timings["denoise_seconds"],
        "decode": timings["decode_seconds"], "png_store": total - stages,
        "total": total, **spent, "load": common.load_average(), "job": job,
        "response": response,
    }  # fmt: skip


def run_service(args: argparse.Namespace, model: str, name: str, work: Path) -> Run:
    """One configuration's request to its own app (its settings: adapters, decoder)."""
    spec, config = spec_for(model), CONFIGS[name]
    model_dir = work / f"share-{name}"
    repo_id = DEFAULT_MODEL_ID if config.shipped else (config.repo_id or spec.repo_id)
    place_on_share(model, model_dir, adapters=config.adapters(model), tiny_decoder=config.tiny,
                   repo_id=repo_id)  # fmt: skip
    env = service_env(model_dir, None if config.shipped else repo_id, work, args.threads)
    env["VAE_TILE_SIZE"] = str(args.vae_tile)  # both sides' tiles (the shipped app: unset)
    app = service_app(config, model, env, work / f"service-{model}-{name}.log")
    app.start(120)
    try:
        load_seconds = wait_ready(app, timeout=1800)
        pid = worker_pid(app)
        load_peak = proc_bytes(pid, "VmHWM")
        wait_for_quiet(args)
        reset_peak(pid)
        load = common.load_average()
        samples = []
        with neighbour(args.neighbour):
            for _ in range(args.repeat):
                samples.append(service_request(app, pid, config, model, args))
        job, response = samples[-1]["job"], samples[-1]["response"]
        samples = [{k: v for k, v in sample.items() if k not in ("job", "response")}
                   for sample in samples]  # fmt: skip
        peak = proc_bytes(pid, "VmHWM")
        status = requests.get(app.url("/model/status"), timeout=30).json()
    finally:
        app.stop()
        shutil.rmtree(model_dir, ignore_errors=True)
    headers = {h: response.headers.get(h) for h in ("X-Steps", "X-Guidance", "X-Scheduler",
                                                     "X-Adjusted")}  # fmt: skip
    for header, value in config.expected_headers(args.steps).items():
        if headers[header] != value:
            raise RuntimeError(f"{name}: the service ran {header} {headers[header]}, not {value}")
    fused = [f"{a['repo']}:{a['file']}" for a in status["adapters"]]
    if fused != [a.label for a in config.adapters(model)] or status["model_id"] != repo_id:
        raise RuntimeError(f"{name}: the service ran {status['model_id']} with {fused}")
    png = work / f"service-{model}-{name}.png"
    png.write_bytes(response.content)
    return Run(
        model=model, config=name, variant="service", threads=args.threads, **medians(samples),
        calls=unet_calls(job), batch=1 if config.guidance <= 1 else 2,
        peak_rss_bytes=peak, load=load, side=job["image"]["parameters"]["width"],
        detail={
            "samples": samples, "png": str(png), "headers": headers,
            "load_seconds": load_seconds, "load_peak_rss_bytes": load_peak,
            "adapters": status["adapters"], "decoder": status["decoder"],
            "seed": job["image"]["parameters"]["seed"],
            "size": [job["image"]["parameters"][k] for k in ("width", "height")],
        },
    )  # fmt: skip


# A request's figures that --repeat takes the median of, on both sides.
SAMPLED = ("encode", "denoise", "decode", "png_store", "total", "cpu", "kernel_cpu",
           "minor_faults")  # fmt: skip


def medians(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Each of SAMPLED's median over the repeated requests of one configuration."""
    figures = {key: statistics.median(sample[key] for sample in samples) for key in SAMPLED}
    return figures | {"minor_faults": round(figures["minor_faults"])}  # an even N: a mean


def process_counters(pid: int | str) -> dict[str, float]:
    """A process's CPU seconds (user and system), the system's share of them and its minor
    page faults so far, all its threads (/proc/<pid>/stat: minflt, utime, stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return {
        "cpu": (int(fields[11]) + int(fields[12])) / tick,
        "kernel_cpu": int(fields[12]) / tick,
        "minor_faults": int(fields[7]),
    }


def counted_since(pid: int | str, before: dict[str, float]) -> dict[str, float]:
    """process_counters' figures since `before` (a request's)."""
    return {key: value - before[key] for key, value in process_counters(pid).items()}


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a process, all its threads."""
    return process_counters(pid)["cpu"]


def wait_for_quiet(args: argparse.Namespace) -> None:
    """Waits (up to --quiet-wait seconds) until the 1-minute load average is below
    --quiet-load: on a shared machine other work slows whichever variant it meets, and the
    service and plain diffusers run minutes apart."""
    deadline = time.monotonic() + args.quiet_wait
    while os.getloadavg()[0] > args.quiet_load and time.monotonic() < deadline:
        time.sleep(5)


@contextmanager
def neighbour(on: bool) -> Iterator[subprocess.Popen | None]:
    """With `on`, a one-core busy loop in a session of its own while the body runs: the
    neighbour a shared machine gives both sides alike (--neighbour)."""
    if not on:
        yield None
        return
    loop = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    try:
        time.sleep(0.5)  # running before the first request
        yield loop
    finally:
        loop.kill()
        loop.wait()


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
        f"{run.png_store:.2f} s | total {run.total:.1f} s (CPU {run.cpu:.0f} s, kernel "
        f"{run.kernel_cpu:.1f} s, {run.minor_faults / 1e6:.2f} M page faults) | peak RSS "
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
    fp32 = result["fp32_bytes"]
    threads = max(r.threads for r in result["runs"])
    by = {(r.config, r.variant, r.threads): r for r in result["runs"]}
    lines = []
    for name in CONFIGS:
        for variant in ("service", "plain"):
            run = by.get((name, variant, threads))
            if run is None:
                continue
            lines.append(measured(f"{LABELS[name]}, {run.calls} calls", run, fp32))
            if name == "defaults":
                calls = run.calls_at_20 or by[("defaults", "plain", threads)].calls_at_20
                lines.append(Line(
                    f"(a) defaults, {SEED_DEFAULT_STEPS} steps (extrapolated)", variant,
                    run.encode, f"{calls} x {run.per_call:.1f} (b{run.batch})", run.decode,
                    run.png_store, run.extrapolated(calls),
                ))  # fmt: skip
    if run := by.get(("fast", "plain", 1)):
        lines.append(measured(f"(b) at 1 thread, {run.calls} calls", run, fp32))
    return lines


def describe_work(work: efficiency.Work) -> str:
    tiny = "" if work.decode_tiny is None else f", tiny decode {work.decode_tiny / 1e12:.2f}"
    tiled = "" if work.decode_tiled is None else " (in its tiles: " \
        f"{work.decode_tiled / 1e12:.2f})"  # fmt: skip
    return (
        f"{work.side}x{work.side}: text encoders {work.encode / 1e12:.2f} TFLOP, a UNet call "
        f"(batch 1) {work.unet_call / 1e12:.2f}, full decode {work.decode_full / 1e12:.2f}"
        f"{tiled}{tiny}"
    )


def stage_flops(run: Run, work: efficiency.Work) -> dict[str, float]:
    """The FLOPs of each stage of `run`: its UNet calls of its batch, its decoder's (the
    full one in the tiles both sides decode in)."""
    return {"encode": work.encode, "denoise": run.calls * run.batch * work.unet_call,
            "decode": work.decode(tiny=CONFIGS[run.config].tiny)}  # fmt: skip


def efficiency_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """For each request, each stage: its TFLOP, seconds, achieved GFLOP/s and the fraction
    of this run's measured peak (the best of the measurements before and after)."""
    works: dict[int, efficiency.Work] = result.get("works") or {}
    peak = max(result["peaks"], key=lambda p: p.best)
    rows = []
    for run in result["runs"]:
        if run.threads != peak.threads:
            continue  # the 1-thread scaling run: another denominator
        flops = stage_flops(run, works.get(run.side, result["work"]))
        seconds = {"encode": run.encode, "denoise": run.denoise, "decode": run.decode}
        # One UNet call (the mean of the run's): the part the issue compares call by call.
        flops["unet call"], seconds["unet call"] = flops["denoise"] / run.calls, run.per_call
        for stage in ("encode", "unet call", "denoise", "decode"):
            achieved, share = efficiency.fraction(flops[stage], seconds[stage], peak)
            rows.append({"config": run.config, "variant": run.variant, "stage": stage,
                         "tflop": flops[stage] / 1e12, "seconds": seconds[stage],
                         "gflops": achieved / 1e9, "of_peak": share})  # fmt: skip
        parts = ("encode", "denoise", "decode")
        total_flops = sum(flops[p] for p in parts)
        total_seconds = sum(seconds[p] for p in parts)
        achieved, share = efficiency.fraction(total_flops, total_seconds, peak)
        rows.append({"config": run.config, "variant": run.variant, "stage": "image",
                     "tflop": total_flops / 1e12, "seconds": total_seconds,
                     "gflops": achieved / 1e9, "of_peak": share})  # fmt: skip
    return rows


def print_efficiency(result: dict[str, Any]) -> None:
    peak = max(result["peaks"], key=lambda p: p.best)
    print(
        "\nefficiency: FLOPs counted (torch FlopCounterMode, 2 per multiply-add) against this "
        f"run's measured peak, {peak.best / 1e9:.0f} GFLOP/s at {peak.threads} threads"
    )
    header = (
        f"{'configuration':<10} {'variant':<8} {'stage':<8} {'TFLOP':>7} {'s':>7} "
        f"{'GFLOP/s':>8} {'of peak':>8}"
    )
    print(header)
    print("-" * len(header))
    for row in efficiency_rows(result):
        print(
            f"{row['config']:<10} {row['variant']:<8} {row['stage']:<8} {row['tflop']:>7.2f} "
            f"{row['seconds']:>7.1f} {row['gflops']:>8.0f} {row['of_peak']:>8.0%}"
        )


def print_table(result: dict[str, Any]) -> None:
    size = f"{result['size']}x{result['size']}"
    print(f"\n{result['model']} at {size}, fp32 weights {result['fp32_bytes'] / GIB:.2f} GiB")
    header = (
        f"{'configuration':<46} {'variant':<8} {'encode':>6} {'UNet calls x s':>18} "
        f"{'decode':>7} {'PNG+rest':>8} {'total s':>8} {'CPU s':>6} {'peak':>6}"
    )
    print(header)
    print("-" * len(header))
    for line in lines_for(result):
        print(
            f"{line.label:<46} {line.variant:<8} {line.encode:>6.1f} {line.unet:>18} "
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
    single-threaded and stay. A tiny decode is scaled as the full decode was (it is a second
    or two of the request, so the assumption moves the figure by less than that)."""
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
    model, fp32 = result["model"], result["fp32_bytes"]
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
            for part, ratio in part_ratios(service, plain).items():
                check(f"{name}: service / plain, {part}", ratio, 1.05, "x")
    for run in result["runs"]:
        if run.variant == "service":
            check(f"{run.config}: service peak RSS in the request / fp32 weights",
                  run.peak_rss_bytes / fp32, 1.15, "x")  # fmt: skip
    fast, tiny = by.get(("fast", "service", threads)), by.get(("fast_tiny", "service", threads))
    speedup = result["speedup_1_to_2"]
    if model == "sdxl":
        if fast:
            check(f"(b) full decoder, {threads} vCPU", fast.total, 240, " s")
            if speedup:
                check("(b) full decoder, 4 vCPU projected", projected_4(fast, speedup), 200, " s")
        if tiny:
            check(f"(c) tiny decoder, {threads} vCPU", tiny.total, 180, " s")
            if speedup:
                check("(c) tiny decoder, 4 vCPU projected", projected_4(tiny, speedup), 120, " s")
        if shipped := by.get(("shipped", "service", threads)):
            check(f"(d) shipped default, {threads} vCPU, inside GEN_SYNC_TIMEOUT", shipped.total,
                  SYNC_TIMEOUT, " s")  # fmt: skip
    return out


def part_ratios(service: Run, plain: Run) -> dict[str, float]:
    """Service / plain seconds of each part: the text encoders, one UNet call (the mean of
    each side's), the decode."""
    return {"text encoders": service.encode / plain.encode,
            "UNet call": service.per_call / plain.per_call,
            "decode": service.decode / plain.decode}  # fmt: skip


def summary_for(result: dict[str, Any], threads: int) -> str:
    by = {(r.config, r.variant, r.threads): r for r in result["runs"]}
    speedup, parts = result["speedup_1_to_2"], []
    for name in ("shipped", "fast", "fast_tiny"):
        if run := by.get((name, "service", threads)):
            part = f"{name} {run.total:.0f} s"
            if speedup:
                part += f" (4 vCPU projected {projected_4(run, speedup):.0f} s)"
            parts.append(part)
    if defaults := by.get(("defaults", "service", threads)):
        calls = by[("defaults", "plain", threads)].calls_at_20
        parts.append(f"defaults at {SEED_DEFAULT_STEPS} steps {defaults.extrapolated(calls):.0f} s")
    return f"{result['model']} {result['size']}x{result['size']}: " + ", ".join(parts)


# --- the run -----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="both", choices=[*sorted(MODELS), "both"])
    parser.add_argument(
        "--configs",
        help=f"some of {','.join(CONFIGS)} ({','.join(DEFAULT_CONFIGS)}; "
        f"{', '.join(sorted(SDXL_ONLY))} with SDXL only)",
    )
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads")
    parser.add_argument("--no-scaling", action="store_true", help="skip the 1-thread run")
    parser.add_argument(
        "--no-plain", action="store_true",
        help="the service only (its seconds, FLOPs and peak memory; no baseline)",
    )  # fmt: skip
    parser.add_argument(
        "--quiet-load",
        type=float,
        default=0.5,
        help="wait before each request until the 1-min load average is below this (0.5)",
    )
    parser.add_argument(
        "--quiet-wait", type=float, default=300, help="waiting for that at most (300 s)"
    )
    parser.add_argument(
        "--vae-tile", type=int, default=VAE_TILE,
        help=f"the full decoder's tiles in pixels, both sides (VAE_TILE_SIZE; {VAE_TILE})",
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="SD 1.5 at 256x256: a smoke run")
    parser.add_argument("--force", action="store_true", help="run even if memory looks short")
    parser.add_argument("--json", type=Path, help="where to write results")
    parser.add_argument("--child", nargs=1, metavar="KIND", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument(
        "--steps", type=int, help="UNet steps for every configuration, both sides (a shorter "
        "run: per-call figures; the presets' own otherwise)",
    )  # fmt: skip
    parser.add_argument(
        "--repeat", type=int, default=1,
        help="requests per configuration on each side, one process each; every figure is "
        "their median (a stage of about a second moved by up to 1.2 s between requests) (1)",
    )  # fmt: skip
    parser.add_argument(
        "--neighbour", action="store_true",
        help="a one-core busy loop beside each side's requests (off)",
    )  # fmt: skip
    parser.add_argument("--seeds", help=argparse.SUPPRESS)  # name=seed,...: the service's
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return args
    args.models = (
        ["sd15"] if args.quick else (["sd15", "sdxl"] if args.model == "both" else [args.model])
    )
    args.size_for = {m: NATIVE[m] // 2 if args.quick else NATIVE[m] for m in args.models}
    asked = args.configs.split(",") if args.configs else list(DEFAULT_CONFIGS)
    unknown = set(asked) - set(CONFIGS)
    if unknown:
        parser.error(f"unknown configs {sorted(unknown)}; choose from {sorted(CONFIGS)}")
    if args.repeat < 1:
        parser.error("--repeat: at least 1 request per configuration")
    if args.configs and set(asked) & SDXL_ONLY and args.models != ["sdxl"]:
        parser.error(f"--configs {','.join(sorted(set(asked) & SDXL_ONLY))}: SDXL only "
                     "(--model sdxl: the default model and the recipes are SDXL's)")  # fmt: skip
    args.configs_for = {
        m: [c for c in asked if m == "sdxl" or c not in SDXL_ONLY] for m in args.models
    }
    return args


def measure_model(args: argparse.Namespace, model: str, work: Path) -> dict[str, Any]:
    spec = spec_for(model)
    ensure_model(model)
    ensure_lora(model)
    ensure_tiny_decoder(model)
    configs = args.configs_for[model]
    if "shipped" in configs:
        ensure_default_lora()
    for name in configs:
        plain_lora(CONFIGS[name], model)  # the recipes' random LoRAs, built once
    fp32 = fp32_bytes(spec.path)
    common.check_memory(int(1.3 * fp32) + 2 * GIB, args.force)
    side = args.size_for[model]
    print(
        f"\n== {spec.repo_id} at {side}x{side}: {', '.join(configs)} "
        f"| fp32 weights {fp32 / GIB:.2f} GiB",
        flush=True,
    )
    works = {
        s: efficiency.count_work(spec.path, s, ensure_tiny_decoder(model), tile=args.vae_tile)
        for s in sorted({side_of(CONFIGS[name], model, args) for name in configs})
    }
    work_counted = works[side] if side in works else efficiency.count_work(spec.path, side)
    for counted in works.values():
        print(f"  FLOPs counted: {describe_work(counted)}", flush=True)
    peaks = [measure_peak(args.threads, work, "peak before")]
    primed = common.prime_size(int(1.5 * fp32))
    print(f"  primed {primed / GIB:.1f} GiB in {common.prime_memory(primed):.1f} s", flush=True)
    service = []
    for name in configs:
        common.read_files(weight_files(spec.path))  # page cache warm for every variant
        service.append(run_service(args, model, name, work))
        print_run(service[-1], fp32)
    seeds = {r.config: r.detail["seed"] for r in service}
    plain, plain_load = [], {}
    for group in [] if args.no_plain else plain_groups(configs):  # one child per LoRA fused
        common.read_files(weight_files(spec.path))
        runs_, plain_load[",".join(group)] = run_plain(
            args, model, group, work, args.threads, steps=args.steps,
            seeds={c: seeds[c] for c in group},
        )  # fmt: skip
        plain += runs_
        for run in runs_:
            print_run(run, fp32)
    runs = service + plain
    speedup = None
    if not args.no_scaling and "fast" in configs and args.threads == 2:
        one_steps = 1 if model == "sdxl" else None  # SDXL: one step is enough for per call
        one, _ = run_plain(args, model, ["fast"], work, 1, steps=one_steps)
        print_run(one[0], fp32)
        runs += one
        speedup = scaling(one[0], next(r for r in plain if r.config == "fast"))
        gains = ", ".join(f"{stage} {gain:.2f}x" for stage, gain in speedup.items())
        print(f"  1 -> 2 threads speed-up: {gains}", flush=True)
    differences = {
        s.config: image_difference(s.detail["png"], p.detail["png"])
        for s in service
        for p in plain
        if s.config == p.config
    }
    peaks.append(measure_peak(args.threads, work, "peak after"))
    return {
        "model": model, "size": side, "fp32_bytes": fp32, "runs": runs,
        "speedup_1_to_2": speedup, "plain_load": plain_load, "image_difference": differences,
        "work": work_counted, "works": works, "peaks": peaks, "neighbour": args.neighbour,
    }  # fmt: skip


def lora_key(name: str) -> str:
    """Which LoRA plain diffusers fuses for a configuration ("" none), without building it."""
    config = CONFIGS[name]
    if config.shipped:
        return "default"
    return "lcm" if config.lora else (config.adapter or "")


def plain_groups(configs: list[str]) -> list[list[str]]:
    """The configurations in the plain children, one child per LoRA fused (a fused LoRA
    cannot be taken out again), in their order; those without a LoRA run first in the first
    child, before it fuses one."""
    groups: dict[str, list[str]] = {}
    for name in configs:
        groups.setdefault(lora_key(name), []).append(name)
    plain = groups.pop("", [])
    fused = list(groups.values())
    if not fused:
        return [plain] if plain else []
    return [plain + fused[0], *fused[1:]]


def side_of(config: Config, model: str, args: argparse.Namespace) -> int:
    """The image's side for a configuration: its own (SDXL-Turbo's 512), else the model's."""
    return config.side or args.size_for[model]


def run(args: argparse.Namespace) -> int:
    machine = common.machine_info()
    common.print_machine(machine, f"torch threads {args.threads}")
    work = scratch_dir("time-to-image-")
    started = time.monotonic()
    try:
        results = [measure_model(args, model, work) for model in args.models]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    verdicts, summaries = [], []
    for result in results:
        print_table(result)
        print_efficiency(result)
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
        "config": {
            "models": args.models, "configs": args.configs_for, "threads": args.threads,
            "steps": args.steps, "vae_tile": args.vae_tile,
            "quick": args.quick, "prompt": PROMPT, "negative_prompt": NEGATIVE, "seed": SEED,
            "lora": "random LCM-LoRA, rank 64, fused (MODEL_ADAPTERS)",
            "default_lora": f"random, rank 64, as {DEFAULT_LORA_REPO}:{DEFAULT_LORA_FILE}",
            "tiny_decoder": "AutoencoderTiny default config, random weights (VAE_DECODER=tiny)",
        },
        "results": [
            r | {"runs": [asdict(x) for x in r["runs"]],
                 "table": [asdict(x) for x in lines_for(r)],
                 "work": r["work"].as_dict(), "peaks": [p.as_dict() for p in r["peaks"]],
                 "works": {side: w.as_dict() for side, w in r["works"].items()},
                 "efficiency": efficiency_rows(r)}
            for r in results
        ],
        "verdicts": verdicts,
    }  # fmt: skip
    common.finish("time_to_image", machine, document, summary, args.json)
    return 0


def peak_child(args: argparse.Namespace) -> int:
    """This machine's fp32 peak at the bench's thread count (bench.efficiency), in a fresh
    process as each variant runs."""
    common.emit_child_result(efficiency.measure_peak(args.threads).as_dict())
    return 0


def peak_from_child(result: dict[str, Any]) -> efficiency.Peak:
    """The Peak of a peak child's result, which also carries what every child reports (its
    peak RSS) and the derived `best`: Peak's own fields only."""
    return efficiency.Peak(**{key: result[key] for key in efficiency.Peak.__dataclass_fields__})


def measure_peak(threads: int, work: Path, when: str) -> efficiency.Peak:
    result = common.run_child(SCRIPT, ["peak", "--threads", str(threads)],
                              work / f"peak-{when}.log", timeout=1800, env={})  # fmt: skip
    peak = peak_from_child(result)
    print(f"  {when}: {efficiency.describe_peak(peak)}", flush=True)
    return peak


def main(argv: list[str] | None = None) -> int:
    def child(args: argparse.Namespace) -> int:
        return peak_child(args) if args.child[0] == "peak" else plain_child(args)

    return common.main(parse_args, run, child, argv)


if __name__ == "__main__":
    sys.exit(main())
