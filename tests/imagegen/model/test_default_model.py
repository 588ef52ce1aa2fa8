"""The shipped defaults make an SDXL image inside one request: with MODEL_ID at its default and
MODEL_ADAPTERS absent, SDXL-Lightning's 4-step LoRA is pulled with the model and fused at load,
a request that sends only a prompt gets its preset (4 steps, guidance 0, trailing Euler), and
TAESDXL, pulled with them, decodes its image. MODEL_ADAPTERS set (even empty: the base model as
it is) or another MODEL_ID changes that; GET /api and GET /model/status say what is in force.

The settings are config/settings.py evaluated with each environment (a process's start); the
answers and the pull run in this process made like one started with that environment
(tests.support.commands.as_a_process_with), against a test hub that serves the tiny SDXL
pipeline and a tiny SDXL LoRA under the real repo names, as the service would find them."""

import io
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import huggingface_hub
import pytest
import torch
from django.test import Client, override_settings

from imagegen.backend import current_backend, rules_from_settings
from imagegen.model.adapters import Adapter
from tests.support.commands import as_a_process_with, settings_of
from tests.support.local_hub import LocalHub
from tests.support.model_service import SD_REPO, SDXL_REPO
from tests.support.tiny_adapters import SDXL_FILE, TAESDXL_REPO, build_adapter_repos

SDXL = "stabilityai/stable-diffusion-xl-base-1.0"
LIGHTNING = Adapter("ByteDance/SDXL-Lightning", "sdxl_lightning_4step_lora.safetensors", 1.0)
LCM = Adapter("latent-consistency/lcm-lora-sdxl", "pytorch_lora_weights.safetensors", 1.0)
LIGHTNING_RULES = {
    "preset": "sdxl-lightning-4step", "steps": 4, "guidance": 0.0, "scheduler": "euler_trailing",
    "max_steps": 4, "max_guidance": 1.0,
    "schedulers": ["ddim_trailing", "dpmpp_2m_trailing", "euler_a_trailing", "euler_trailing"],
}  # fmt: skip
BASE_RULES = {
    "preset": None, "steps": 20, "guidance": 7.0, "scheduler": None, "max_steps": None,
    "max_guidance": None, "schedulers": None,
}  # fmt: skip
# What the shell running the tests may have set and a fresh process must not see.
UNSET = (
    "MODEL_ID", "MODEL_ADAPTERS", "GEN_FOLLOW_MODEL", "GEN_DEFAULT_STEPS", "GEN_DEFAULT_GUIDANCE",
    "GEN_DEFAULT_SCHEDULER", "GEN_STEPS_CAP", "GEN_GUIDANCE_CAP",
)  # fmt: skip


def configured(**variables: str) -> tuple[str, tuple[Adapter, ...], tuple]:
    """MODEL_ID, MODEL_ADAPTERS and the generation rules (preset, steps, guidance, scheduler)
    of a process started with only these variables (and a key) in its environment."""
    found = settings_of({"SECRET_KEY": "test", **variables})
    model = {k: v for k, v in found.items() if k.startswith(("MODEL_", "GEN_"))}
    with override_settings(**model):
        rules = rules_from_settings()
    return (
        found["MODEL_ID"],
        found["MODEL_ADAPTERS"],
        (rules.preset, rules.steps, rules.guidance, rules.scheduler),
    )


LIGHTNING_PRESET = ("sdxl-lightning-4step", 4, 0.0, "euler_trailing")
BASE_PRESET = (None, 20, 7.0, None)  # SDXL's own: 20 steps with guidance, its own scheduler


def test_the_defaults_are_sdxl_with_the_lightning_lora_and_its_preset():
    assert configured() == (SDXL, (LIGHTNING,), LIGHTNING_PRESET)


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        # Set, even empty or blank, MODEL_ADAPTERS is taken as it is: the base model as it is.
        ({"MODEL_ADAPTERS": ""}, (SDXL, (), BASE_PRESET)),
        ({"MODEL_ADAPTERS": " "}, (SDXL, (), BASE_PRESET)),
        ({"MODEL_ADAPTERS": f"{LCM.repo}:{LCM.file}"},
         (SDXL, (LCM,), ("lcm-lora", 4, 1.0, "lcm"))),
        # Another model gets no default adapter: its own preset or none.
        ({"MODEL_ID": "stabilityai/sdxl-turbo"},
         ("stabilityai/sdxl-turbo", (), ("turbo", 1, 0.0, "euler_a_trailing"))),
        ({"MODEL_ID": SD_REPO}, (SD_REPO, (), BASE_PRESET)),
        # The default id named explicitly (deploy/azure.sh does), in any case, is the default.
        ({"MODEL_ID": SDXL}, (SDXL, (LIGHTNING,), LIGHTNING_PRESET)),
        ({"MODEL_ID": SDXL.upper()}, (SDXL.upper(), (LIGHTNING,), LIGHTNING_PRESET)),
        # Presets off: the LoRA is still fused, requests get SDXL's own defaults.
        ({"GEN_FOLLOW_MODEL": "0"}, (SDXL, (LIGHTNING,), BASE_PRESET)),
        # The operator's own defaults still win over the preset, as with any adapter.
        ({"GEN_DEFAULT_STEPS": "6"}, (SDXL, (LIGHTNING,), ("sdxl-lightning-4step", 6, 0.0,
                                                          "euler_trailing"))),
    ],
    ids=["empty", "blank", "another-adapter", "turbo", "another-model", "default-id-named",
         "default-id-in-capitals", "gen-follow-model-off", "gen-default-steps"],
)  # fmt: skip
def test_model_adapters_set_or_another_model_id_change_the_default(variables, expected):
    assert configured(**variables) == expected


@pytest.mark.parametrize(
    ("variables", "decoder"),
    [
        ({}, "tiny"),
        ({"MODEL_ID": SDXL.upper()}, "tiny"),
        ({"MODEL_ADAPTERS": f"{LIGHTNING.repo}:{LIGHTNING.file}"}, "tiny"),  # the same preset
        ({"MODEL_ADAPTERS": ""}, "full"),  # the base model as it is
        ({"MODEL_ADAPTERS": f"{LCM.repo}:{LCM.file}"}, "full"),
        ({"MODEL_ADAPTERS": f"{LIGHTNING.repo}:{LIGHTNING.file}:0.5"}, "full"),
        ({"MODEL_ID": SD_REPO}, "full"),
        ({"VAE_DECODER": "full"}, "full"),  # said, taken as it is
        ({"MODEL_ID": SD_REPO, "VAE_DECODER": "tiny"}, "tiny"),
    ],
    ids=["defaults", "default-id-in-capitals", "default-lora-named", "model-adapters-empty",
         "another-adapter", "default-lora-at-half", "another-model", "full-said",
         "tiny-said"],
)  # fmt: skip
def test_the_shipped_preset_decodes_with_the_tiny_decoder_and_any_other_choice_keeps_the_full(
    variables, decoder
):
    assert settings_of({"SECRET_KEY": "test", **variables})["VAE_DECODER"].kind == decoder


# --- what a process of those settings answers, and its pull -----------------------------------


@pytest.fixture
def fresh_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No model or generation setting inherited from the shell that runs the tests; no
    telemetry call (huggingface_hub would ask the public hub before its first request)."""
    for name in UNSET:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_TELEMETRY", True)


@pytest.fixture
def default_hub(hub_root: Path, tmp_path: Path) -> Iterator[LocalHub]:
    """A hub serving the tiny SDXL pipeline as the default MODEL_ID, a tiny SDXL LoRA (fp16,
    kohya keys, as SDXL-Lightning's) as its 4-step LoRA, beside its 8-step one, and a tiny
    AutoencoderTiny as TAESDXL."""
    build_adapter_repos(hub_root, sd_repo=SD_REPO, sdxl_repo=SDXL_REPO)
    root = tmp_path / "hub"
    shutil.copytree(hub_root / SDXL_REPO, root / SDXL)
    shutil.copytree(hub_root / TAESDXL_REPO, root / TAESDXL_REPO)
    lightning = root / LIGHTNING.repo
    lightning.mkdir(parents=True)
    for name in (LIGHTNING.file, "sdxl_lightning_8step_lora.safetensors"):
        shutil.copyfile(hub_root / "testorg" / "tiny-lora" / SDXL_FILE, lightning / name)
    with LocalHub(root) as hub:
        yield hub


def service_env(hub: LocalHub, tmp_path: Path, **variables: str) -> dict[str, str]:
    return {
        "HF_ENDPOINT": hub.url,
        "MODEL_DIR": str(tmp_path / "share"),
        "DOWNLOAD_CACHE_DIR": str(tmp_path / "cache"),
        "OUTPUT_DIR": str(tmp_path / "images"),
        "DEVICE": "cpu",
        **variables,
    }


@pytest.mark.parametrize(
    ("variables", "adapters", "rules", "decoder"),
    [
        ({}, [asdict(LIGHTNING)], LIGHTNING_RULES, "tiny"),
        ({"MODEL_ADAPTERS": ""}, [], BASE_RULES, "full"),
    ],
    ids=["defaults", "model-adapters-empty"],
)
def test_the_index_and_the_status_say_what_is_in_force(
    fresh_environment, default_hub, tmp_path, variables, adapters, rules, decoder
):
    with as_a_process_with(service_env(default_hub, tmp_path, **variables), *output()):
        index = Client().get("/api").json()
        status = Client().get("/model/status").json()
    assert index["generation"] == {**rules, "adapters": adapters}
    assert (status["state"], status["model_id"]) == ("not_started", SDXL)
    assert status["adapters"] == adapters
    assert status["generation"] == rules
    assert status["decoder"]["kind"] == decoder


def test_a_pull_of_the_defaults_fetches_the_lora_with_the_model_and_a_prompt_gets_its_preset(
    fresh_environment, default_hub, tmp_path
):
    hub, share = default_hub, tmp_path / "share"
    with as_a_process_with(service_env(hub, tmp_path), *output()):
        client = Client()
        assert client.get("/model/status").json()["state"] == "not_started"
        assert client.post("/model/pull").status_code == 202
        status = wait_until_ready(client)
        assert status["generation"]["preset"] == "sdxl-lightning-4step"

        answer = client.post("/generate", {"prompt": "a lighthouse at dawn", "size": "64x64"})
        assert answer.status_code == 200, answer.content
        assert (answer["X-Steps"], answer["X-Guidance"], answer["X-Scheduler"]) == (
            "4", "0", "Euler SGM Uniform"  # euler_trailing, by A1111's name
        )  # fmt: skip
        assert "X-Adjusted" not in answer
        # What webuiapi sends unasked (20 steps, CFG 7, Euler a) runs the LoRA's own 4 steps.
        webuiapi = {"steps": "20", "guidance": "7", "scheduler": "Euler a"}
        held = client.post("/generate", {"prompt": "a lighthouse", "size": "64x64", **webuiapi})
        assert held.status_code == 200, held.content
        assert (held["X-Steps"], held["X-Guidance"]) == ("4", "1")
        assert held["X-Adjusted"] == (
            "scheduler Euler a->Euler SGM Uniform, steps 20->4, guidance 7->1"
        )
        assert status["decoder"] == {"kind": "tiny", "repo": TAESDXL_REPO}
        pipe = current_backend().loader.pipeline(timeout=1)
        decoder = type(pipe.vae).__name__
        dtypes = {p.dtype for part in (pipe.unet, pipe.text_encoder_2) for p in part.parameters()}
        vae_slicing_and_tiling = (pipe.vae.use_slicing, pipe.vae.use_tiling)

    model_files = fetched(hub, SDXL)
    assert model_files and all(".fp16." in f for f in model_files if f.endswith(".safetensors"))
    assert fetched(hub, LIGHTNING.repo) == [LIGHTNING.file]  # the 4-step one only, once
    assert sorted(fetched(hub, TAESDXL_REPO)) == [
        "config.json",
        "diffusion_pytorch_model.safetensors",
    ]
    assert decoder == "AutoencoderTiny"  # TAESDXL decodes the preset's images
    on_share = share / "stabilityai--stable-diffusion-xl-base-1.0"
    adapter = on_share / "adapters" / "ByteDance--SDXL-Lightning" / LIGHTNING.file
    # The hub's fp16 file as it is on the share; read and fused as fp32 at load.
    assert adapter.read_bytes() == (hub.root / LIGHTNING.repo / LIGHTNING.file).read_bytes()
    assert dtypes == {torch.float32}
    assert vae_slicing_and_tiling == (True, True)  # the seed's rule, with the LoRA too
    assert not [p for p in share.rglob("*") if "lock" in p.name.lower()]  # lock-free


def output() -> tuple[io.StringIO, io.StringIO]:
    return io.StringIO(), io.StringIO()


def wait_until_ready(client: Client, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while (status := client.get("/model/status").json())["state"] not in ("ready", "failed"):
        assert time.monotonic() < deadline, status
        time.sleep(0.05)
    assert status["state"] == "ready", status
    return status


def fetched(hub: LocalHub, repo: str) -> list[str]:
    """Paths in `repo` whose bodies the hub served (each once per fetch), sorted."""
    prefix = f"/{repo}/resolve/"
    paths = [p[len(prefix) :] for p in hub.file_gets() if p.startswith(prefix)]
    return sorted(path.split("/", 1)[1] for path in paths)
