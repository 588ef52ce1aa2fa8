"""Full-size-architecture diffusers repos with random weights, for the image benchmarks.

Why it exists: load time, peak memory and step latency depend on the architecture and the
byte count, not on what the weights say, so random weights cost exactly what real ones cost.
Building them from the real configs needs no download and no token. Each model is built
once (components one at a time, so SDXL's 10 GB fp32 UNet is the largest thing in memory)
and cached under `bench/.cache/hub/<org>/<name>/` in the layout of a hub repo: configs,
tokenizer and scheduler files, and only the `fp16` variant's safetensors (what the service
pulls by default; it upcasts to fp32 on load). `bench/.cache/hub` is a LocalHub root, so the
cached repo can also be served over HTTP like the real hub.

    .venv/bin/python bench/model_fixture.py build [--model sd15|sdxl]   # build if missing
    .venv/bin/python bench/model_fixture.py info [--model sd15|sdxl]    # what is cached
    .venv/bin/python bench/model_fixture.py serve [--model sd15|sdxl]   # LocalHub until EOF

Not a benchmark itself: the `*_bench.py` scripts import it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.local_hub import LocalHub  # noqa: E402

CACHE = ROOT / "bench" / ".cache"
HUB_ROOT = CACHE / "hub"
BUILT = CACHE / "built"
TMP = CACHE / "tmp"
VARIANT = "fp16"
SEED = 0

# The scheduler settings SD 1.5 (PNDM) and SDXL (Euler) ship with.
_BETAS = {"beta_start": 0.00085, "beta_end": 0.012, "beta_schedule": "scaled_linear"}
SD15_SCHEDULER = _BETAS | {
    "num_train_timesteps": 1000,
    "skip_prk_steps": True,
    "set_alpha_to_one": False,
    "steps_offset": 1,
}
SDXL_SCHEDULER = _BETAS | {
    "num_train_timesteps": 1000,
    "steps_offset": 1,
    "timestep_spacing": "leading",
    "interpolation_type": "linear",
    "prediction_type": "epsilon",
}
# openai/clip-vit-large-patch14's text tower (SD 1.5's and SDXL's first text encoder).
CLIP_L_TEXT = {
    "vocab_size": 49408,
    "hidden_size": 768,
    "intermediate_size": 3072,
    "projection_dim": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "max_position_embeddings": 77,
    "hidden_act": "quick_gelu",
    "layer_norm_eps": 1e-5,
    "bos_token_id": 0,
    "eos_token_id": 2,
    "pad_token_id": 1,
}
# laion/CLIP-ViT-bigG-14's text tower (SDXL's text_encoder_2).
CLIP_BIGG_TEXT = CLIP_L_TEXT | {
    "hidden_size": 1280,
    "intermediate_size": 5120,
    "projection_dim": 1280,
    "num_hidden_layers": 32,
    "num_attention_heads": 20,
    "hidden_act": "gelu",
}
SD15_UNET = {
    "sample_size": 64,
    "in_channels": 4,
    "out_channels": 4,
    "down_block_types": ["CrossAttnDownBlock2D"] * 3 + ["DownBlock2D"],
    "up_block_types": ["UpBlock2D"] + ["CrossAttnUpBlock2D"] * 3,
    "block_out_channels": [320, 640, 1280, 1280],
    "layers_per_block": 2,
    "cross_attention_dim": 768,
    "attention_head_dim": 8,
    "norm_num_groups": 32,
    "norm_eps": 1e-5,
}
SDXL_UNET = {
    "sample_size": 128,
    "in_channels": 4,
    "out_channels": 4,
    "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
    "up_block_types": ["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"],
    "block_out_channels": [320, 640, 1280],
    "layers_per_block": 2,
    "transformer_layers_per_block": [1, 2, 10],
    "cross_attention_dim": 2048,
    "attention_head_dim": [5, 10, 20],
    "use_linear_projection": True,
    "addition_embed_type": "text_time",
    "addition_time_embed_dim": 256,
    "projection_class_embeddings_input_dim": 2816,
    "norm_num_groups": 32,
    "norm_eps": 1e-5,
}
SD15_VAE = {
    "in_channels": 3,
    "out_channels": 3,
    "down_block_types": ["DownEncoderBlock2D"] * 4,
    "up_block_types": ["UpDecoderBlock2D"] * 4,
    "block_out_channels": [128, 256, 512, 512],
    "layers_per_block": 2,
    "latent_channels": 4,
    "norm_num_groups": 32,
    "sample_size": 512,
    "scaling_factor": 0.18215,
}
SDXL_VAE = SD15_VAE | {"sample_size": 1024, "scaling_factor": 0.13025, "force_upcast": True}


@dataclass(frozen=True)
class ModelSpec:
    name: str
    repo_id: str
    pipeline_class: str
    model_index: dict[str, Any]
    components: dict[str, Callable[[Path], int]]  # folder -> writer returning param count

    @property
    def path(self) -> Path:
        return HUB_ROOT / self.repo_id

    @property
    def marker(self) -> Path:
        return BUILT / f"{self.name}.json"


# --- component writers (each builds one component, saves it, and frees it) -----------------


def _save_fp16(model: Any, folder: Path) -> int:
    """Saves only the fp16 variant's weights and a config that describes the fp32 model."""
    import torch

    params = sum(p.numel() for p in model.parameters())
    model.to(torch.float16)
    model.save_pretrained(folder, variant=VARIANT, safe_serialization=True)
    config_path = folder / "config.json"
    config = json.loads(config_path.read_text())
    for key in ("dtype", "torch_dtype"):
        if key in config:
            config[key] = "float32"  # like the real repos: fp32 default, fp16 variant
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return params


def _seeded(build: Callable[[], Any]) -> Any:
    import torch

    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        return build()


def _unet_writer(config: dict[str, Any]) -> Callable[[Path], int]:
    def write(folder: Path) -> int:
        from diffusers import UNet2DConditionModel

        return _save_fp16(_seeded(lambda: UNet2DConditionModel(**config)), folder)

    return write


def _vae_writer(config: dict[str, Any]) -> Callable[[Path], int]:
    def write(folder: Path) -> int:
        from diffusers import AutoencoderKL

        return _save_fp16(_seeded(lambda: AutoencoderKL(**config)), folder)

    return write


def _text_writer(config: dict[str, Any], *, projection: bool) -> Callable[[Path], int]:
    def write(folder: Path) -> int:
        from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

        model_class = CLIPTextModelWithProjection if projection else CLIPTextModel
        return _save_fp16(_seeded(lambda: model_class(CLIPTextConfig(**config))), folder)

    return write


def _tokenizer_writer(folder: Path) -> int:
    # The tests' CLIP-style BPE tokenizer (vocab.json/merges.txt, model_max_length 77); its
    # vocabulary is small, but every id it produces is inside the real 49408-row embedding.
    from tests.support.tiny_model import _write_tokenizer

    _write_tokenizer(folder)
    return 0


def _scheduler_writer(class_name: str, **config: Any) -> Callable[[Path], int]:
    def write(folder: Path) -> int:
        import diffusers

        getattr(diffusers, class_name)(**config).save_pretrained(folder)
        return 0

    return write


SD15 = ModelSpec(
    name="sd15",
    repo_id="bench/sd15-random",
    pipeline_class="StableDiffusionPipeline",
    model_index={
        "feature_extractor": [None, None],
        "image_encoder": [None, None],
        "requires_safety_checker": False,
        "safety_checker": [None, None],
        "scheduler": ["diffusers", "PNDMScheduler"],
        "text_encoder": ["transformers", "CLIPTextModel"],
        "tokenizer": ["transformers", "CLIPTokenizer"],
        "unet": ["diffusers", "UNet2DConditionModel"],
        "vae": ["diffusers", "AutoencoderKL"],
    },
    components={
        "tokenizer": _tokenizer_writer,
        "scheduler": _scheduler_writer("PNDMScheduler", **SD15_SCHEDULER),
        "text_encoder": _text_writer(CLIP_L_TEXT, projection=False),
        "vae": _vae_writer(SD15_VAE),
        "unet": _unet_writer(SD15_UNET),
    },
)

SDXL = ModelSpec(
    name="sdxl",
    repo_id="bench/sdxl-random",
    pipeline_class="StableDiffusionXLPipeline",
    model_index={
        "feature_extractor": [None, None],
        "force_zeros_for_empty_prompt": True,
        "image_encoder": [None, None],
        "scheduler": ["diffusers", "EulerDiscreteScheduler"],
        "text_encoder": ["transformers", "CLIPTextModel"],
        "text_encoder_2": ["transformers", "CLIPTextModelWithProjection"],
        "tokenizer": ["transformers", "CLIPTokenizer"],
        "tokenizer_2": ["transformers", "CLIPTokenizer"],
        "unet": ["diffusers", "UNet2DConditionModel"],
        "vae": ["diffusers", "AutoencoderKL"],
    },
    components={
        "tokenizer": _tokenizer_writer,
        "tokenizer_2": _tokenizer_writer,
        "scheduler": _scheduler_writer("EulerDiscreteScheduler", **SDXL_SCHEDULER),
        "text_encoder": _text_writer(CLIP_L_TEXT, projection=False),
        "text_encoder_2": _text_writer(CLIP_BIGG_TEXT, projection=True),
        "vae": _vae_writer(SDXL_VAE),
        "unet": _unet_writer(SDXL_UNET),
    },
)

# Segmind's SSD-1B: SDXL's UNet with transformer layers and the mid block's attention taken
# out, as its published layer counts have it (ComfyUI's model detection, stable-diffusion.cpp:
# transformer depth 2 and 4 per attention going down; going up 4, 4, 10 at 1280 channels and
# 2, 1, 1 at 640; a mid block of one ResNet); text encoders, VAE and scheduler are SDXL's.
SSD1B_UNET = SDXL_UNET | {
    "transformer_layers_per_block": [1, 2, 4],
    "reverse_transformer_layers_per_block": [[4, 4, 10], [2, 1, 1], [1, 1, 1]],
    "mid_block_type": "UNetMidBlock2D",
}
SSD1B = ModelSpec(
    name="ssd1b",
    repo_id="bench/ssd-1b-random",
    pipeline_class=SDXL.pipeline_class,
    model_index=SDXL.model_index,
    components=SDXL.components | {"unet": _unet_writer(SSD1B_UNET)},
)

# The tests' tiny SD (tests.support.tiny_model): what a benchmark's checks run on in the suite,
# so a quick run takes seconds and needs no 2 GB build. Its figures measure nothing.
TINY = ModelSpec(
    name="tiny",
    repo_id="testorg/tiny-sd",
    pipeline_class="StableDiffusionPipeline",
    model_index={},
    components={},
)

MODELS = {spec.name: spec for spec in (SD15, SDXL, SSD1B, TINY)}


# --- building and the cache ------------------------------------------------------------------


def spec_for(name: str) -> ModelSpec:
    if name not in MODELS:
        raise SystemExit(f"unknown model {name!r}; expected one of {sorted(MODELS)}")
    return MODELS[name]


def peak_rss_bytes() -> int:
    """This process's peak resident set size (VmHWM), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def is_built(spec: ModelSpec) -> bool:
    return spec.marker.is_file() and (spec.path / "model_index.json").is_file()


def build(spec: ModelSpec, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Builds the repo in a scratch folder, one component at a time, then moves it in place."""
    import diffusers

    TMP.mkdir(parents=True, exist_ok=True)
    work = TMP / f"build-{spec.name}-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    started = time.monotonic()
    params: dict[str, int] = {}
    try:
        for folder, write in spec.components.items():
            component_started = time.monotonic()
            params[folder] = write(work / folder)
            log(
                f"  {folder:<15} {params[folder] / 1e6:9.1f} M params "
                f"{time.monotonic() - component_started:6.1f} s  "
                f"(peak RSS so far {peak_rss_bytes() / 2**30:.1f} GiB)"
            )
        index = {"_class_name": spec.pipeline_class, "_diffusers_version": diffusers.__version__}
        (work / "model_index.json").write_text(
            json.dumps(index | spec.model_index, indent=2) + "\n"
        )
        shutil.rmtree(spec.path, ignore_errors=True)
        spec.path.parent.mkdir(parents=True, exist_ok=True)
        work.rename(spec.path)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    info = {
        "model": spec.name,
        "repo_id": spec.repo_id,
        "path": str(spec.path),
        "variant": VARIANT,
        "build_seconds": round(time.monotonic() - started, 1),
        "build_peak_rss_bytes": peak_rss_bytes(),
        "bytes_on_disk": tree_bytes(spec.path),
        "params": params,
        "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    BUILT.mkdir(parents=True, exist_ok=True)
    spec.marker.write_text(json.dumps(info, indent=2) + "\n")
    return info


def ensure_model(name: str, log: Callable[[str], None] = print) -> Path:
    """The cached repo's path, built first when missing (minutes; SD 1.5 once, ~2 GB)."""
    spec = spec_for(name)
    if spec is TINY and not is_built(spec):
        # Built aside and moved in whole: the suite's two workers may both ask for it at once.
        from tests.support.tiny_model import build_tiny_pipeline

        work = build_tiny_pipeline(TMP / f"tiny-{os.getpid()}")
        spec.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            work.rename(spec.path)
        except OSError:  # the other one's is in place
            shutil.rmtree(work, ignore_errors=True)
        BUILT.mkdir(parents=True, exist_ok=True)
        spec.marker.write_text(json.dumps({"model": spec.name, "path": str(spec.path)}) + "\n")
    if not is_built(spec):
        log(f"building {spec.repo_id} (random weights, full-size configs) in {spec.path} ...")
        info = build(spec, log)
        log(
            f"built {spec.repo_id} in {info['build_seconds']:.0f} s, "
            f"{info['bytes_on_disk'] / 1e9:.2f} GB on disk"
        )
    return spec.path


def build_info(name: str) -> dict[str, Any]:
    spec = spec_for(name)
    return json.loads(spec.marker.read_text()) if is_built(spec) else {}


def weight_files(path: Path) -> list[Path]:
    """The weight files diffusers loads for the fp16 variant, one per component here."""
    return sorted(path.glob(f"*/*.{VARIANT}.safetensors"))


def safetensors_header(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        length = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(length))


def fp32_bytes(path: Path) -> int:
    """What the weights occupy once upcast to fp32: 4 bytes per element, from the headers."""
    total = 0
    for file in weight_files(path):
        for key, entry in safetensors_header(file).items():
            if key == "__metadata__":
                continue
            count = 1
            for dim in entry["shape"]:
                count *= dim
            total += 4 * count
    return total


def scratch_dir(prefix: str) -> Path:
    """A fresh temp dir under bench/.cache/tmp (the benches write nothing outside bench/)."""
    import tempfile

    TMP.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=TMP))


# --- what the model pulls beside itself: a LoRA of the real rank, the tiny decoder ------------

# LCM-LoRA per model: the published ones are rank 64 over diffusers' LCM distillation targets
# (tests.support.tiny_adapters.LCM_LORA_TARGETS), UNet only, fp16, kohya keys.
LCM_LORAS = {
    "sd15": "latent-consistency/lcm-lora-sdv1-5",
    "sdxl": "latent-consistency/lcm-lora-sdxl",
    "ssd1b": "latent-consistency/lcm-lora-ssd-1b",
}
LORA_FILE = "pytorch_lora_weights.safetensors"
LORA_RANK = 64
LORA_ALPHA = float(LORA_RANK)  # only scales B.A: no effect on any cost
LORA_STRENGTH = 0.05  # |scale B.A| about 5 % of a freshly initialised weight's size
TINY_DECODERS = {
    "sd15": "madebyollin/taesd",
    "sdxl": "madebyollin/taesdxl",
    "ssd1b": "madebyollin/taesdxl",
}


def lora_repo(name: str) -> str:
    return LCM_LORAS[name]


def ensure_lora(name: str, log: Callable[[str], None] = print) -> Path:
    """A random LCM-LoRA of the real rank and layers for the model (cached): its cost at load
    and per step is what the real one's is (fused, it costs nothing per step)."""
    return _random_lora(name, HUB_ROOT / LCM_LORAS[name] / LORA_FILE, log)


# The LoRA the service pulls and fuses with its default model when MODEL_ADAPTERS is unset
# (imagegen.model.adapters.DEFAULT_MODEL_ADAPTERS): SDXL-Lightning's 4-step LoRA is, like
# SDXL's LCM-LoRA, rank 64 over the UNet only, kohya keys, fp16 (394 MB on the hub:
# imagegen.model.download_size), so the random one has LCM-LoRA's layers under its name.
DEFAULT_LORA_REPO = "ByteDance/SDXL-Lightning"
DEFAULT_LORA_FILE = "sdxl_lightning_4step_lora.safetensors"


def ensure_default_lora(log: Callable[[str], None] = print) -> Path:
    """A random LoRA of SDXL-Lightning's 4-step rank, layers and size, in its repo and file
    (cached), so the service's default configuration finds it where a pull puts it."""
    return _random_lora("sdxl", HUB_ROOT / DEFAULT_LORA_REPO / DEFAULT_LORA_FILE, log)


def ensure_named_lora(repo: str, file: str, log: Callable[[str], None] = print) -> Path:
    """A random SDXL LoRA of LCM-LoRA's rank and layers under another repo and file (cached),
    standing for a recipe's LoRA (Hyper-SD's): fused into the weights, a LoRA's rank and
    layers cost nothing per step, so the image's time is the real one's."""
    return _random_lora("sdxl", HUB_ROOT / repo / file, log)


def _random_lora(name: str, file: Path, log: Callable[[str], None]) -> Path:
    from tests.support.tiny_adapters import random_lora, save_lora, to_kohya

    if not file.is_file():
        log(f"building a random rank-{LORA_RANK} LoRA for {name} in {file} ...")
        unet_config = json.loads((ensure_model(name) / "unet" / "config.json").read_text())
        state = random_lora(
            unet_config, rank=LORA_RANK, alpha=LORA_ALPHA, seed=SEED, strength=LORA_STRENGTH
        )
        partial = file.with_suffix(".partial")
        save_lora(to_kohya(state, alpha=LORA_ALPHA), partial)
        partial.rename(file)
    return file


def ensure_tiny_decoder(name: str) -> Path:
    """taesd / taesdxl with random weights: AutoencoderTiny's default config is their
    architecture (they differ only in weights), saved as their repos ship it."""
    import torch
    from diffusers import AutoencoderTiny

    folder = HUB_ROOT / TINY_DECODERS[name]
    if not (folder / "diffusion_pytorch_model.safetensors").is_file():
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(SEED)
            AutoencoderTiny().save_pretrained(folder, safe_serialization=True)
    return folder


# --- a warm share without a pull --------------------------------------------------------------

SHARE_COMMIT = "0" * 40  # the cached repos have no git history; the manifest needs a commit


def _link(source: Path, target: Path) -> int:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
    return source.stat().st_size


def place_on_share(
    name: str,
    model_dir: Path,
    *,
    adapters: tuple = (),
    tiny_decoder: bool = False,
    repo_id: str | None = None,
    source: Path | None = None,
    hub_root: Path = HUB_ROOT,
    decoder_source: Path | None = None,
) -> Path:
    """The cached repo laid out as a complete download in `model_dir` (MODEL_DIR), as a pull
    leaves it: every file under `<org>--<name>/`, the `adapters` (imagegen Adapter objects,
    each a LoRA from ensure_lora or ensure_default_lora) and the tiny decoder in their places
    inside it, and the manifest, naming them, written last; so the service started with the
    matching MODEL_ID, MODEL_ADAPTERS and VAE_DECODER loads it warm and asks no hub. `repo_id`
    places it as another repo (the service's default MODEL_ID: the random SDXL stands for
    it). Files are hard links into the cache (copies across file systems): a bench that times
    generations should not spend minutes and 7 GB of disk on a pull first (pull_bench times
    that). `source`, `hub_root` and `decoder_source` place another repo, adapters and tiny
    decoder (a smoke run's tiny ones) under the names of `name`'s."""
    from imagegen.model.decoder import share_folder
    from imagegen.model.share import (
        AdapterRecord,
        DecoderRecord,
        ModelFile,
        model_path,
        write_manifest,
    )

    spec = spec_for(name)
    if source is None:
        source = ensure_model(name)
    repo_id = repo_id or spec.repo_id
    dest = model_path(model_dir, repo_id)
    files = []
    for file in sorted(p for p in source.rglob("*") if p.is_file()):
        relative = file.relative_to(source).as_posix()
        files.append(ModelFile(path=relative, size=_link(file, dest / relative)))
    records = []
    for adapter in adapters:
        file = hub_root / adapter.repo / adapter.file
        files.append(ModelFile(adapter.share_path, _link(file, dest / adapter.share_path)))
        records.append(AdapterRecord(adapter.repo, adapter.file, SHARE_COMMIT, adapter.share_path))
    decoder = None
    if tiny_decoder:
        repo, folder = TINY_DECODERS[name], share_folder(TINY_DECODERS[name])
        for file in sorted((decoder_source or ensure_tiny_decoder(name)).iterdir()):
            path = f"{folder}/{file.name}"
            files.append(ModelFile(path=path, size=_link(file, dest / path)))
        decoder = DecoderRecord(repo, SHARE_COMMIT, folder)
    write_manifest(
        dest, model_id=repo_id, requested_revision="main", commit=SHARE_COMMIT,
        variant=VARIANT, files=files, adapters=tuple(records), decoder=decoder,
    )  # fmt: skip
    return dest


# --- serving the cache as a hub ---------------------------------------------------------------


def warm_hub(url: str, repo_id: str) -> None:
    """Asks for the repo's info once, so the hub hashes every file before anyone times it."""
    with urllib.request.urlopen(f"{url}/api/models/{repo_id}", timeout=600) as response:
        response.read()


@contextlib.contextmanager
def served_hub(name: str) -> Iterator[tuple[str, str]]:
    """(endpoint, repo id) of a LocalHub in this process serving the cached model."""
    spec = spec_for(name)
    ensure_model(name)
    with LocalHub(HUB_ROOT) as hub:
        warm_hub(hub.url, spec.repo_id)
        yield hub.url, spec.repo_id


@contextlib.contextmanager
def hub_process(name: str, timeout: float = 600.0) -> Iterator[tuple[str, str]]:
    """(endpoint, repo id) of a LocalHub in its own process, so its threads do not compete
    for the GIL with whatever this process measures. Stops it on exit, errors included."""
    spec = spec_for(name)
    ensure_model(name)
    process = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "serve", "--model", name],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"the hub process exited with {process.wait(timeout)}")
        yield json.loads(line)["url"], spec.repo_id
    finally:
        stop_hub_process(process)


def stop_hub_process(process: subprocess.Popen) -> None:
    with contextlib.suppress(OSError):
        if process.stdin is not None:
            process.stdin.close()  # EOF: the server stops
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        process.wait()


def serve_until_eof(name: str) -> None:
    spec = spec_for(name)
    ensure_model(name, log=lambda text: print(text, file=sys.stderr))
    with LocalHub(HUB_ROOT) as hub:
        warm_hub(hub.url, spec.repo_id)
        print(json.dumps({"url": hub.url, "repo_id": spec.repo_id}), flush=True)
        print(f"serving {spec.repo_id} at {hub.url}; EOF on stdin stops", file=sys.stderr)
        with contextlib.suppress(KeyboardInterrupt):
            sys.stdin.read()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("build", "info", "serve"))
    parser.add_argument("--model", default="sd15", choices=sorted(MODELS))
    parser.add_argument("--force", action="store_true", help="build: rebuild even if cached")
    args = parser.parse_args(argv)
    spec = spec_for(args.model)
    if args.command == "build":
        if args.force:
            spec.marker.unlink(missing_ok=True)
        ensure_model(args.model)
        print(json.dumps(build_info(args.model), indent=2))
    elif args.command == "info":
        info = build_info(args.model)
        if info:
            info["fp32_weight_bytes"] = fp32_bytes(spec.path)
        print(json.dumps(info or {"model": args.model, "built": False}, indent=2))
    else:
        serve_until_eof(args.model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
