"""Hires fix benchmark: the service's hires fix 512 -> 1024 and its 1024x1024 made directly,
each beside plain diffusers doing the same, in the same run.

Why it exists: a hires fix is one job of three phases (imagegen/generation/hires_render.py):
a first pass at the smaller size, the latents resized, then an img2img second pass at the
target with the loaded pipeline's own components. What it costs beside the plain way of doing
the same by hand, and beside simply rendering the target size, is what a user weighs. One run,
on the full-size random-weight SDXL of bench/model_fixture.py with the default recipe (the
service as it ships: SDXL base with SDXL-Lightning's 4-step LoRA fused, its preset's 4 steps,
guidance 0, trailing Euler, decoded by TAESDXL), times four requests:

- service hires: `POST /generate` with `{"size": "512x512", "hires": {"scale": 2,
  "upscaler": "Latent"}}`, a prompt and a seed, the recipe's defaults for the rest (the second
  pass runs the first pass's steps at strength 0.7);
- service direct: the same with `"size": "1024x1024"` and no `hires`;
- plain hires: diffusers by hand as its documentation allows: the text-to-image pipeline at
  512 with `output_type="latent"`, torch's `interpolate` (bilinear, A1111's `Latent`) to
  128x128 latents, then `AutoPipelineForImage2Image.from_pipe` of the same components at
  strength 0.7 running the same steps (as A1111 and the service do, the schedule is stretched
  so that 0.7 of it is those steps: 6 timesteps for 4), with the same generator;
- plain direct: the text-to-image pipeline at 1024.

Both sides get the same LoRA fused, scheduler, guidance, seed and decoder (plain diffusers set
up as bench/time_to_image_bench.py sets it up). Each side runs in a fresh child process (two
SDXL pipelines do not fit): the service is the app in that process (its settings from the
environment, the model placed on its share as a complete download, pulled and loaded through
its routes before timing), its requests sent over a loopback port; plain diffusers is
`from_pretrained(variant="fp16", dtype=float32)`. Hooks on the UNet count and time its calls
on both sides (by latent size: the first pass's and the second's), so both sides are checked
to have run the same calls; each image's size is checked.

Run it alone on the machine, under the lock the full-size benches share:

    flock /tmp/fullsize-bench.lock .venv/bin/python bench/hires_bench.py        # SDXL, ~25 min
    flock /tmp/fullsize-bench.lock .venv/bin/python bench/hires_bench.py --model sd15
    flock /tmp/fullsize-bench.lock .venv/bin/python bench/hires_bench.py --rounds 2  # ~50 min
    .venv/bin/python bench/hires_bench.py --quick   # the tests' tiny SD 64 -> 128, in process

`--model sd15` runs SD 1.5 with its LCM-LoRA (MODEL_ADAPTERS; the preset's 4 steps, guidance
1, LCM) and the full decoder: its 20-step defaults at 1024 take too long here.

`--rounds N` runs the service's child and plain's child in turn N times (service, plain,
service, plain, ...), so that a load arriving on a shared machine falls on both sides rather
than on one; each ratio is the median of the rounds' ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import io
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
from bench.common import GIB, fmt_ratio, ratio  # noqa: E402
from bench.model_fixture import (  # noqa: E402
    ensure_default_lora,
    ensure_lora,
    ensure_model,
    ensure_tiny_decoder,
    fp32_bytes,
    place_on_share,
    scratch_dir,
    spec_for,
    weight_files,
)
from bench.time_to_image_bench import (  # noqa: E402
    FAST,
    PROMPT,
    SEED,
    SHIPPED,
    SHIPPED_UNSET,
    VAE_TILE,
    Config,
    image_difference,
    prepare_plain,
    service_env,
)

SCRIPT = Path(__file__).resolve()
STRENGTH = 0.7  # the service's default (A1111's), sent by neither side's caller
SCALE = 2
VARIANTS = ("hires", "direct")
# The quick run's recipe on the tiny SD (no preset): sent explicitly, the same on both sides.
QUICK = Config("quick", steps=2, guidance=0.0, scheduler="euler_trailing")
QUICK_FIELDS = {"steps": 2, "guidance": 0, "scheduler": "euler_trailing"}


@dataclass(frozen=True)
class Recipe:
    """What both sides run: a model (bench/model_fixture.py's name), its first pass's side
    and a time_to_image Config (steps, guidance, scheduler, LoRA, decoder)."""

    model: str
    side: int  # the first pass's; the target is SCALE times it
    config: Config
    label: str

    @property
    def target(self) -> int:
        return self.side * SCALE


RECIPES = {
    "sdxl": Recipe("sdxl", 512, SHIPPED, "the shipped default: SDXL + Lightning 4-step LoRA "
                   "fused, 4 steps, guidance 0, trailing Euler, TAESDXL"),
    "sd15": Recipe("sd15", 512, FAST, "SD 1.5 + LCM-LoRA fused, 4 steps, guidance 1, LCM, "
                   "full decoder"),
    "tiny": Recipe("tiny", 64, QUICK, "the tests' tiny SD, 2 steps, guidance 0, trailing "
                   "Euler (measures nothing)"),
}  # fmt: skip


@dataclass
class Run:
    side: str  # "service" or "plain"
    variant: str  # "hires" or "direct"
    seconds: float  # request to PNG bytes
    size: list[int]  # the image's width and height
    calls: dict[str, int]  # UNet calls by latent side ("64": 4, "128": 4)
    unet_seconds: dict[str, float]  # their seconds, by latent side
    batch: int
    load: str  # the machine's load average when the request started
    peak_rss_bytes: int = 0  # the child's, through its requests
    round: int = 1  # which of --rounds (service then plain in each)
    png: str = ""
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def unet_total(self) -> float:
        return sum(self.unet_seconds.values())


def second_pass_timesteps(steps: int, strength: float) -> int:
    """The fewest timesteps of which img2img at `strength` runs `steps` (diffusers runs
    int(timesteps x strength) of them): what a user asks of it to run the same steps."""
    total = steps
    while int(total * strength) < steps:
        total += 1
    return total


class UnetCalls:
    """Forward hooks on a UNet: each call's seconds and batch, by its latents' side."""

    def __init__(self, unet: Any) -> None:
        self.unet = unet
        self.calls: list[tuple[int, int, float]] = []  # (side, batch, seconds)
        self._started = 0.0
        self._hooks: list[Any] = []

    def __enter__(self) -> UnetCalls:
        def before(_module: Any, args: tuple, kwargs: dict) -> None:
            self._sample = args[0] if args else kwargs["sample"]
            self._started = time.perf_counter()

        def after(*_: Any) -> None:
            seconds = time.perf_counter() - self._started
            self.calls.append((self._sample.shape[-1], self._sample.shape[0], seconds))

        self._hooks = [
            self.unet.register_forward_pre_hook(before, with_kwargs=True),
            self.unet.register_forward_hook(after),
        ]
        return self

    def __exit__(self, *_: Any) -> None:
        for hook in self._hooks:
            hook.remove()

    def taken(self) -> dict[str, Any]:
        """The calls so far, by side, and forgets them."""
        calls: dict[str, int] = {}
        seconds: dict[str, float] = {}
        for side, _batch, spent in self.calls:
            calls[str(side)] = calls.get(str(side), 0) + 1
            seconds[str(side)] = seconds.get(str(side), 0.0) + spent
        batch = max((b for _, b, _ in self.calls), default=0)
        self.calls = []
        return {"calls": calls, "unet_seconds": seconds, "batch": batch}


def png_size(data: bytes) -> list[int]:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return list(image.size)


# --- the service --------------------------------------------------------------------------------


def body(recipe: Recipe, variant: str) -> dict[str, Any]:
    """The native JSON request: a prompt, a seed and the size; the recipe's defaults for the
    rest (the quick run's tiny model has none: its fields are sent)."""
    fields: dict[str, Any] = {"prompt": PROMPT, "seed": SEED}
    if variant == "hires":
        fields |= {"size": f"{recipe.side}x{recipe.side}",
                   "hires": {"scale": SCALE, "upscaler": "Latent"}}  # fmt: skip
    else:
        fields["size"] = f"{recipe.target}x{recipe.target}"
    return fields | (QUICK_FIELDS if recipe.config is QUICK else {})


def place_service(recipe: Recipe, share: Path) -> str | None:
    """The recipe's model (and LoRA, and tiny decoder) on the share; the MODEL_ID to set
    (None: the shipped default, unset)."""
    config = recipe.config
    if config.shipped:
        from imagegen.model.adapters import DEFAULT_MODEL_ID

        place_on_share("sdxl", share, adapters=config.adapters("sdxl"), tiny_decoder=True,
                       repo_id=DEFAULT_MODEL_ID)  # fmt: skip
        return None
    spec = spec_for(recipe.model)
    adapters = () if config is QUICK else config.adapters(recipe.model)
    place_on_share(recipe.model, share, adapters=adapters, tiny_decoder=config.tiny,
                   repo_id=spec.repo_id, source=ensure_model(recipe.model))  # fmt: skip
    return spec.repo_id


def app_env(recipe: Recipe, share: Path, work: Path, threads: int) -> dict[str, str]:
    repo_id = place_service(recipe, share)
    env = service_env(share, repo_id, work, threads)
    if recipe.config.shipped:  # nothing set: service_env's own settings only
        return env
    env["VAE_TILE_SIZE"] = str(VAE_TILE)  # the full decoder's tiles, as plain diffusers has them
    if recipe.config is QUICK:
        return env | {"VAE_DECODER": "full"}
    return env | recipe.config.service_env(recipe.model)


@contextlib.contextmanager
def served(env: dict[str, str], shipped: bool) -> Iterator[Any]:
    """The app in this process on a backend built from `env` (tests.support.in_process's
    served_here: the settings a start parses from them, the app on a loopback port); for the
    shipped recipe none of the settings that pick the defaults, whatever this shell sets."""
    import django

    from tests.support.in_process import served_here

    if shipped:
        for key in SHIPPED_UNSET:
            os.environ.pop(key, None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("SECRET_KEY", "hires-bench")  # the app is on a loopback port only
    django.setup()
    with served_here(**env) as app:
        yield app


def service_side(recipe: Recipe, work: Path, threads: int, variants: list[str]) -> dict:
    """Both requests to the app in this process, after its model is pulled from the share and
    loaded; the UNet's calls counted through hooks on the loaded pipeline's UNet."""
    import requests

    share = work / "share"
    env = app_env(recipe, share, work, threads)
    runs = []
    with served(env, recipe.config.shipped) as app:
        started = time.monotonic()
        requests.post(app.url("/model/pull"), timeout=60).raise_for_status()
        while (status := requests.get(app.url("/model/status"), timeout=60).json())[
            "state"
        ] != "ready":
            if status["state"] == "failed" or time.monotonic() - started > 1800:
                raise RuntimeError(f"the model did not load: {status}")
            time.sleep(0.2)
        load_seconds = time.monotonic() - started
        pipe = app.backend.loader.pipeline(60)
        with UnetCalls(pipe.unet) as unet:
            for variant in variants:
                load = common.load_average()
                begun = time.perf_counter()
                response = requests.post(
                    app.url("/generate"), json=body(recipe, variant), timeout=7200
                )
                seconds = time.perf_counter() - begun
                if response.status_code != 200:
                    raise RuntimeError(f"/generate: {response.status_code} {response.text[:300]}")
                png = work / f"service-{variant}.png"
                png.write_bytes(response.content)
                headers = {h: response.headers.get(h) for h in (
                    "X-Steps", "X-Guidance", "X-Scheduler", "X-Size", "X-Hires-Size",
                    "X-Preset", "X-Model", "X-Seed")}  # fmt: skip
                runs.append(asdict(Run(
                    "service", variant, seconds, png_size(response.content), **unet.taken(),
                    load=load, png=str(png), detail={"headers": headers},
                )))  # fmt: skip
        adapters = [f"{a['repo']}:{a['file']}" for a in status["adapters"]]
    return {"runs": runs, "load_seconds": load_seconds, "adapters": adapters,
            "model_id": status["model_id"], "decoder": status["decoder"]}  # fmt: skip


# --- plain diffusers --------------------------------------------------------------------------


def plain_side(recipe: Recipe, work: Path, threads: int, variants: list[str]) -> dict:
    """Plain diffusers set up as time_to_image_bench sets it up for the recipe (the LoRA
    fused, the decoder, the scheduler), the hires fix by hand beside the direct render."""
    import torch
    from diffusers import AutoPipelineForImage2Image, DiffusionPipeline
    from torch.nn.functional import interpolate

    started = time.perf_counter()
    pipe = DiffusionPipeline.from_pretrained(
        ensure_model(recipe.model), variant="fp16", dtype=torch.float32
    )
    pipe.set_progress_bar_config(disable=True)
    prepare_plain(pipe, recipe.config, recipe.model, pipe.vae)
    img2img = AutoPipelineForImage2Image.from_pipe(pipe)  # the same components, no copy
    img2img.set_progress_bar_config(disable=True)
    load_seconds = time.perf_counter() - started
    config = recipe.config
    common_args = {"prompt": PROMPT, "guidance_scale": config.guidance}
    runs = []
    with UnetCalls(pipe.unet) as unet:
        for variant in variants:
            load = common.load_average()
            begun = time.perf_counter()
            generator = torch.Generator("cpu").manual_seed(SEED)
            with torch.inference_mode():
                if variant == "hires":
                    latents = pipe(
                        **common_args, num_inference_steps=config.steps, width=recipe.side,
                        height=recipe.side, generator=generator, output_type="latent",
                    ).images  # fmt: skip
                    side = recipe.target // pipe.vae_scale_factor
                    latents = interpolate(latents, size=(side, side), mode="bilinear")
                    image = img2img(
                        **common_args, image=latents, strength=STRENGTH, generator=generator,
                        num_inference_steps=second_pass_timesteps(config.steps, STRENGTH),
                    ).images[0]  # fmt: skip
                else:
                    image = pipe(
                        **common_args, num_inference_steps=config.steps, width=recipe.target,
                        height=recipe.target, generator=generator,
                    ).images[0]  # fmt: skip
            buffer = io.BytesIO()
            image.save(buffer, format="PNG")
            png = work / f"plain-{variant}.png"
            png.write_bytes(buffer.getvalue())
            seconds = time.perf_counter() - begun
            runs.append(asdict(Run(
                "plain", variant, seconds, png_size(buffer.getvalue()), **unet.taken(),
                load=load, png=str(png),
            )))  # fmt: skip
    return {"runs": runs, "load_seconds": load_seconds}


# --- the run ----------------------------------------------------------------------------------


def measure(side: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import torch

    recipe = RECIPES[args.model]
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        part = service_side if side == "service" else plain_side
        result = part(recipe, work / side, args.threads, args.variants)
    finally:
        torch.set_num_threads(threads)
    return result


def run_as_child(args: argparse.Namespace) -> int:
    side, work = args.child
    if side == "service":  # as the service's web process starts (config/wsgi.py)
        from imagegen.model.malloc_arena import use_one_arena

        use_one_arena()
    common.emit_child_result(measure(side, args, Path(work)))
    return 0


def measure_side(
    side: str, args: argparse.Namespace, work: Path, round_number: int = 1
) -> dict[str, Any]:
    (work / side).mkdir(parents=True, exist_ok=True)
    if args.quick:  # in process: the smoke run starts no process
        result = measure(side, args, work)
        result["peak_rss_bytes"] = common.proc_status_bytes("VmHWM")
    else:
        common.read_files(weight_files(spec_for(args.model).path))  # page cache warm for each
        result = common.run_child(
            SCRIPT,
            [side, str(work), "--model", args.model, "--threads", str(args.threads),
             "--variants", ",".join(args.variants)],
            work / f"{side}.log", timeout=4 * 3600, env={},
        )  # fmt: skip
    runs = [Run(**r) for r in result.pop("runs")]
    for run in runs:
        run.peak_rss_bytes = result["peak_rss_bytes"]
        run.round = round_number
        print_run(run)
    print(f"  {side}: loaded in {result['load_seconds']:.1f} s", flush=True)
    return {"runs": runs, **result}


def describe_calls(run: Run) -> str:
    return " + ".join(
        f"{count} x {side}² ({run.unet_seconds[side] / count:.1f} s)"
        for side, count in sorted(run.calls.items(), key=lambda item: int(item[0]))
    )


def print_run(run: Run) -> None:
    print(
        f"  {run.side:<7} {run.variant:<6} {run.size[0]}x{run.size[1]}: {run.seconds:.1f} s | "
        f"UNet {describe_calls(run)} = {run.unet_total:.1f} s (batch {run.batch}) | rest "
        f"{run.seconds - run.unet_total:.1f} s | peak RSS {run.peak_rss_bytes / GIB:.2f} GiB | "
        f"load {run.load} | round {run.round}",
        flush=True,
    )


def checked(service: dict[str, Any], plain: dict[str, Any], recipe: Recipe) -> None:
    """Both sides made images of the sizes asked with the same UNet calls; the service ran
    the recipe (its headers), its default model and LoRA where the recipe is the shipped one."""
    target = [recipe.target, recipe.target]
    by_side = {(r.side, r.variant): r for r in service["runs"] + plain["runs"]}
    for (side, variant), run in by_side.items():
        if run.size != target:
            raise RuntimeError(f"{side} {variant}: an image of {run.size}, not {target}")
        other = by_side[("plain" if side == "service" else "service", variant)]
        if (run.calls, run.batch) != (other.calls, other.batch):
            raise RuntimeError(
                f"{variant}: UNet calls {run.calls} (batch {run.batch}) on the {side} side, "
                f"{other.calls} (batch {other.batch}) beside it"
            )
    config = recipe.config
    for run in service["runs"]:
        expected = config.expected_headers(config.steps * (2 if run.variant == "hires" else 1))
        expected["X-Size"] = f"{recipe.side}x{recipe.side}" if run.variant == "hires" else (
            f"{recipe.target}x{recipe.target}")  # fmt: skip
        if run.variant == "hires":
            expected["X-Hires-Size"] = f"{recipe.target}x{recipe.target}"
        for header, value in expected.items():
            if run.detail["headers"][header] != value:
                raise RuntimeError(f"service {run.variant}: it ran {header} "
                                   f"{run.detail['headers'][header]}, not {value}")  # fmt: skip
    wanted = [a.label for a in config.adapters(recipe.model)] if config is not QUICK else []
    if service["adapters"] != wanted:
        raise RuntimeError(f"the service ran {service['adapters']}, not {wanted}")


def round_result(service: dict[str, Any], plain: dict[str, Any]) -> dict[str, Any]:
    """One round's seconds by side and variant, its ratios and its pictures' differences."""
    runs = {(r.side, r.variant): r for r in service["runs"] + plain["runs"]}
    seconds = {f"{side}_{variant}": run.seconds for (side, variant), run in runs.items()}
    ratios = {
        "hires_service_vs_plain": ratio(seconds["service_hires"], seconds["plain_hires"]),
        "direct_service_vs_plain": ratio(seconds["service_direct"], seconds["plain_direct"]),
        "service_hires_vs_direct": ratio(seconds["service_hires"], seconds["service_direct"]),
        "plain_hires_vs_direct": ratio(seconds["plain_hires"], seconds["plain_direct"]),
    }
    differences = {
        variant: image_difference(runs[("service", variant)].png, runs[("plain", variant)].png)
        for variant in VARIANTS
    }
    return {"service": service, "plain": plain, "seconds": seconds, "ratios": ratios,
            "differences": differences}  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default="sdxl", choices=["sdxl", "sd15"],
        help="sdxl: the shipped default recipe; sd15: with its LCM-LoRA (sdxl)",
    )  # fmt: skip
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count() or 1, help="torch threads (nproc)"
    )
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help="their order on each side (hires,direct)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="the tests' tiny SD, 64 -> 128, in process, 1 thread"
    )
    parser.add_argument(
        "--rounds", type=int, default=1,
        help="service and plain in turn this many times; ratios are the rounds' medians (1)",
    )  # fmt: skip
    parser.add_argument("--force", action="store_true", help="run even if memory looks short")
    parser.add_argument("--json", type=Path, help="where to write results")
    parser.add_argument("--child", nargs=2, metavar=("SIDE", "WORK"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.model, args.threads = "tiny", 1
    if args.rounds < 1:
        parser.error(f"--rounds: at least 1, not {args.rounds}")
    args.variants = args.variants.split(",")
    if sorted(args.variants) != sorted(VARIANTS):
        parser.error(f"--variants: {','.join(VARIANTS)} in some order")
    return args


def run(args: argparse.Namespace) -> int:
    recipe = RECIPES[args.model]
    machine = common.machine_info()
    common.print_machine(machine, f"torch threads {args.threads}")
    spec = spec_for(recipe.model)
    ensure_model(recipe.model)
    if recipe.config.shipped:
        ensure_default_lora()
        ensure_tiny_decoder(recipe.model)
    elif recipe.config.lora:
        ensure_lora(recipe.model)
    fp32 = fp32_bytes(spec.path)
    print(
        f"recipe: {recipe.label} | {recipe.side} -> {recipe.target} (Latent, strength "
        f"{STRENGTH}) beside {recipe.target} directly | fp32 weights {fp32 / GIB:.2f} GiB"
        f"{' | quick, in process' if args.quick else ''}",
        flush=True,
    )
    work = scratch_dir("hires-bench-")
    rounds = []
    try:
        if not args.quick:
            common.check_memory(int(1.3 * fp32) + 2 * GIB, args.force)
            primed = common.prime_size(int(1.5 * fp32))
            print(f"  primed {primed / GIB:.1f} GiB in {common.prime_memory(primed):.1f} s")
        for number in range(1, args.rounds + 1):
            if args.rounds > 1:
                print(f"round {number} of {args.rounds}: load {common.load_average()}", flush=True)
            round_work = work / f"round-{number}"
            service = measure_side("service", args, round_work, number)
            plain = measure_side("plain", args, round_work, number)
            checked(service, plain, recipe)
            rounds.append(round_result(service, plain))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    first_service, first_plain = rounds[0]["service"], rounds[0]["plain"]
    all_runs = [r for each in rounds for r in each["service"]["runs"] + each["plain"]["runs"]]
    ratios = {key: common.median([each["ratios"][key] for each in rounds])
              for key in rounds[0]["ratios"]}  # fmt: skip
    seconds = {key: common.median([each["seconds"][key] for each in rounds])
               for key in rounds[0]["seconds"]}  # fmt: skip
    differences = {variant: max(each["differences"][variant] for each in rounds)
                   for variant in VARIANTS}  # fmt: skip
    label = {"hires": f"{recipe.side} -> {recipe.target} (Latent)", "direct": "directly"}
    common.print_table(
        [("round", 5), ("side", 8), ("variant", 7), ("image", 9), ("s", 7), ("vs plain", 8),
         ("UNet s", 7), ("rest s", 7), ("peak GiB", 8), ("load", 14), ("UNet calls", 0)],
        [[str(r.round), r.side, r.variant, f"{r.size[0]}x{r.size[1]}", f"{r.seconds:.1f}",
          fmt_ratio(rounds[r.round - 1]["ratios"][f"{r.variant}_service_vs_plain"]
                    if r.side == "service" else 1.0),
          f"{r.unet_total:.1f}", f"{r.seconds - r.unet_total:.1f}",
          f"{r.peak_rss_bytes / GIB:.2f}", r.load.split()[0],
          f"{describe_calls(r)}, {label[r.variant]}"]
         for r in all_runs],
    )  # fmt: skip
    spread = ""
    if args.rounds > 1:
        each = ", ".join(fmt_ratio(r["ratios"]["hires_service_vs_plain"]) for r in rounds)
        spread = f"; medians of {args.rounds} rounds (hires service / plain: {each})"
    summary = (
        f"summary: {recipe.model} hires fix {recipe.side}->{recipe.target}, {args.threads} "
        f"threads: service {seconds['service_hires']:.1f} s = "
        f"{fmt_ratio(ratios['hires_service_vs_plain'])} plain ({seconds['plain_hires']:.1f} s); "
        f"{recipe.target} directly: service {seconds['service_direct']:.1f} s = "
        f"{fmt_ratio(ratios['direct_service_vs_plain'])} plain ({seconds['plain_direct']:.1f} "
        f"s); hires / direct {fmt_ratio(ratios['service_hires_vs_direct'])} (service), "
        f"{fmt_ratio(ratios['plain_hires_vs_direct'])} (plain); mean pixel difference "
        f"{differences['hires']:.2f} and {differences['direct']:.2f} of 255{spread}"
    )
    document = {
        "config": {
            "model": recipe.model, "recipe": recipe.label, "side": recipe.side,
            "target": recipe.target, "strength": STRENGTH, "upscaler": "Latent",
            "threads": args.threads, "quick": args.quick, "seed": SEED,
            "variants": args.variants, "fp32_bytes": fp32, "rounds": args.rounds,
        },
        "runs": [asdict(r) for r in all_runs],
        "load_seconds": {"service": first_service["load_seconds"],
                         "plain": first_plain["load_seconds"]},
        "service": {k: first_service[k] for k in ("adapters", "model_id", "decoder")},
        "image_difference": differences,
        "ratios": ratios,
        "rounds": [{k: each[k] for k in ("seconds", "ratios", "differences")}
                   for each in rounds],
    }  # fmt: skip
    common.finish(f"hires_{recipe.model}", machine, document, summary, args.json)
    return 0


def main(argv: list[str] | None = None) -> int:
    return common.main(parse_args, run, run_as_child, argv)


if __name__ == "__main__":
    sys.exit(main())
