"""LORAS and the dropped LoRA files: how an entry is written, what a malformed one does to the
start, the pull onto the share beside the models (POST /model/pull with no body, manage.py
pull_model; warm pulls skip), the model each fits by its layers' names and sizes, and A1111's
GET /sdapi/v1/loras and POST /refresh-loras through webuiapi. In process (served_here), with
MODEL_ID the tiny SD model and MODELS the tiny SDXL one."""

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import webuiapi
from django.core.exceptions import ImproperlyConfigured

from imagegen.model import share
from imagegen.model.loras import LoraEntry, parse_loras, repo_path
from tests.support.commands import run_command
from tests.support.in_process import LoopbackApp, served_here
from tests.support.local_hub import LocalHub
from tests.support.model_service import SD_REPO, SDXL_REPO, model_service_env
from tests.support.tiny_adapters import (
    KOHYA_FILE,
    LORA_REPO,
    PEFT_FILE,
    SDXL_FILE,
    build_adapter_repos,
)

# The SD LoRA as "sd-style", the SDXL one by its stem.
LORAS = f"{LORA_REPO}:{KOHYA_FILE}=sd-style, {LORA_REPO}:{SDXL_FILE}"


def test_entries_are_repo_files_named_by_their_stem_unless_named():
    assert parse_loras(f" {LORA_REPO}:{PEFT_FILE} , org/x:a.safetensors=Style-1.5,") == (
        LoraEntry(LORA_REPO, PEFT_FILE, "sd_lora"),
        LoraEntry("org/x", "a.safetensors", "Style-1.5"),
    )
    assert parse_loras("") == ()


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("org/x", "'org/x' is not repo:file"),
        ("noslash:a.safetensors", "'noslash' in 'noslash:a.safetensors' is not a hub repo id"),
        ("org/x:a.ckpt", "'org/x:a.ckpt' must name a .safetensors file"),
        ("org/x:../a.safetensors", "the file in 'org/x:../a.safetensors' must be a path"),
        ("org/x:a.safetensors=my style", "the name 'my style' in"),
        ("org/x:a.safetensors,org/y:A.safetensors", "the name 'A' is given twice"),
    ],
)
def test_a_malformed_entry_stops_the_start_naming_it(value, named):
    """The app's start (manage.py check's, as a web process's) refuses it."""
    with pytest.raises(ImproperlyConfigured, match=f"^LORAS: {named}"):
        run_command("check", env={"MODEL_ID": SD_REPO, "LORAS": value})


@pytest.fixture(scope="module")
def hub(hub_root: Path) -> Iterator[LocalHub]:
    build_adapter_repos(hub_root, sd_repo=SD_REPO, sdxl_repo=SDXL_REPO)
    with LocalHub(hub_root) as served:
        yield served


@pytest.fixture(scope="module")
def app(hub: LocalHub, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackApp]:
    work = tmp_path_factory.mktemp("loras")
    env = model_service_env(hub.url, work / "share", work)
    with served_here(**env, MODELS=SDXL_REPO, LORAS=LORAS) as served:
        yield served


def status(app: LoopbackApp) -> dict:
    return requests.get(app.url("/model/status"), timeout=30).json()


def wait_ready(app: LoopbackApp, index: int) -> dict:
    deadline = time.monotonic() + 120
    while (entry := status(app)["models"][index])["state"] != "ready":
        assert entry["state"] != "failed", entry
        assert time.monotonic() < deadline, entry
        time.sleep(0.05)
    return entry


def test_a_pull_with_no_body_pulls_every_lora_and_a1111_lists_each_with_the_model_it_fits(
    app, hub_root
):
    model_dir = Path(app.env["MODEL_DIR"])
    folder = repo_path(model_dir, LORA_REPO)
    api = webuiapi.WebUIApi(baseurl=app.url("/sdapi/v1"))
    before = {lora["name"]: lora for lora in api.get_loras()}
    assert list(before) == ["sd-style", "sdxl_lora"]
    assert before["sd-style"]["metadata"] == {} and before["sd-style"]["models"] == []
    assert not folder.exists()

    assert requests.post(app.url("/model/pull"), timeout=30).status_code == 202
    wait_ready(app, 0)
    manifest = share.read_manifest(folder)
    assert manifest is not None and {f.path for f in manifest.files} == {KOHYA_FILE, SDXL_FILE}
    assert (folder / KOHYA_FILE).read_bytes() == (hub_root / LORA_REPO / KOHYA_FILE).read_bytes()
    assert requests.post(app.url("/model/pull"), params={"model": SDXL_REPO}, timeout=30).ok
    wait_ready(app, 1)

    listed = {lora["name"]: lora for lora in api.get_loras()}
    # Names alone would have the SD LoRA fit SDXL too: its layer names are SDXL's.
    assert listed["sd-style"]["models"] == [SD_REPO]
    assert listed["sdxl_lora"]["models"] == [SDXL_REPO]
    assert listed["sd-style"]["path"] == f"loras/testorg--tiny-lora/{KOHYA_FILE}"  # not an admin
    assert listed["sd-style"]["alias"] == "sd-style"
    assert listed["sd-style"]["metadata"] == {"format": "pt"}

    # A file dropped into MODEL_DIR/loras is offered by its stem once refreshed.
    shutil.copy(hub_root / LORA_REPO / PEFT_FILE, model_dir / "loras" / "dropped.safetensors")
    assert "dropped" not in {lora["name"] for lora in api.get_loras()}
    refreshed = requests.post(app.url("/sdapi/v1/refresh-loras"), timeout=30)  # not webuiapi's
    assert refreshed.status_code == 200, refreshed.text
    dropped = {lora["name"]: lora for lora in api.get_loras()}["dropped"]
    assert dropped["path"] == "loras/dropped.safetensors" and dropped["models"] == [SD_REPO]


def test_the_state_turns_ready_only_once_every_lora_is_on_the_share(hub, tmp_path):
    """A LORAS file the repo lacks fails the pull, naming LORAS; the model is never ready."""
    env = model_service_env(hub.url, tmp_path / "share", tmp_path)
    with served_here(**env, LORAS=f"{LORA_REPO}:absent.safetensors") as app:
        assert requests.post(app.url("/model/pull"), timeout=30).status_code == 202
        deadline = time.monotonic() + 120
        while (answer := status(app))["state"] != "failed":
            assert answer["state"] != "ready" and time.monotonic() < deadline, answer
            time.sleep(0.05)
        assert "LORAS" in answer["error"] and "absent.safetensors" in answer["error"]


def test_pull_model_pulls_the_loras_and_a_warm_run_skips_them(hub, tmp_path):
    env = {**model_service_env(hub.url, tmp_path / "share", tmp_path), "LORAS": LORAS}
    first = run_command("pull_model", env=env)
    assert first.returncode == 0, first.stderr
    folder = repo_path(tmp_path / "share", LORA_REPO)
    assert (folder / SDXL_FILE).is_file() and share.read_manifest(folder) is not None
    placed = (folder / SDXL_FILE).stat().st_mtime_ns
    again = run_command("pull_model", env=env)
    assert again.returncode == 0 and "nothing to download" in again.stdout, again.stdout
    # A LoRA added later is pulled alone; the placed one stays as it was.
    more = {**env, "LORAS": f"{LORAS},{LORA_REPO}:{PEFT_FILE}"}
    third = run_command("pull_model", env=more)
    assert third.returncode == 0, third.stderr
    assert (folder / PEFT_FILE).is_file() and (folder / SDXL_FILE).stat().st_mtime_ns == placed
