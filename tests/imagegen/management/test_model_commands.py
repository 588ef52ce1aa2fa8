"""manage.py pull_model (cold, warm, --force, --check; the adapters and the tiny decoder too),
model_status (the share, or a service by --base-url) and generate as operators run them.

Each command runs once as a real process (manage: the cold pull, model_status --json in
test_run_command_answers_as_the_real_process, the generation that writes a PNG); the other
calls run in this process (run_command; run_beside next to the service served here), with
the settings, exit code and output the real process gives:
test_run_command_answers_as_the_real_process holds the two to each other."""

import json
from dataclasses import astuple

import numpy as np
from django.conf import settings
from PIL import Image

from imagegen import backend
from tests.support.commands import manage, run_beside, run_command
from tests.support.in_process import served_here
from tests.support.model_service import SD_REPO, SDXL_REPO
from tests.support.processes import free_port
from tests.support.scripted_service import Reply, ScriptedService
from tests.support.tiny_adapters import KOHYA_FILE, LORA_REPO, TAESD_REPO, build_adapter_repos


def test_pull_model_cold_then_warm_then_check(model_env, hub, share):
    before = run_command("model_status", "--json", env=model_env)
    assert before.returncode == 0
    assert json.loads(before.stdout)["complete"] is False

    cold = manage("pull_model", env=model_env)  # the real process of pull_model
    assert cold.returncode == 0, cold.stderr
    assert f"{SD_REPO}@{hub.commit(SD_REPO)[:12]}: 12 files" in cold.stdout
    assert (share / "testorg--tiny-sd" / ".manifest.json").exists()

    hub.reset_log()
    warm = run_command("pull_model", env=model_env)
    assert warm.returncode == 0
    assert "is complete on the share" in warm.stdout
    assert hub.requests == []

    status = json.loads(run_command("model_status", "--json", env=model_env).stdout)
    assert status["complete"] is True and status["files"] == 12
    assert status["commit"] == hub.commit(SD_REPO)
    model = share / "testorg--tiny-sd"
    placed = [f for f in model.rglob("*") if f.is_file() and f.name != ".manifest.json"]
    assert len(placed) == 12 and status["bytes"] == sum(f.stat().st_size for f in placed)

    plain = run_command("model_status", env=model_env)  # the same state, one "key: value" a line
    assert plain.returncode == 0, plain.stderr
    lines = dict(line.strip().split(": ", 1) for line in plain.stdout.splitlines())
    assert {key: lines[key] for key in ("complete", "commit", "files", "bytes")} == {
        "complete": "True",
        "commit": hub.commit(SD_REPO),
        "files": "12",
        "bytes": str(status["bytes"]),
    }

    check = run_command("pull_model", "--check", env=model_env)
    assert check.returncode == 0, check.stderr
    assert "match the hub's sizes and hashes" in check.stdout


def test_check_names_each_corrupted_file(model_env, share):
    assert run_command("pull_model", env=model_env).returncode == 0
    model = share / "testorg--tiny-sd"
    weights = model / "unet" / "diffusion_pytorch_model.fp16.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other content
    weights.write_bytes(bytes(data))
    config = model / "vae" / "config.json"
    config.write_text(config.read_text()[:-10])  # truncated

    check = run_command("pull_model", "--check", env=model_env)
    assert check.returncode == 1
    assert "unet/diffusion_pytorch_model.fp16.safetensors: sha256 differs" in check.stderr
    assert "vae/config.json: size" in check.stderr
    assert "text_encoder" not in check.stderr


def test_pull_model_fails_with_one_clear_line_on_a_hub_error(model_env, hub, share):
    hub.fail_status = 500
    result = run_command("pull_model", env=model_env)
    assert result.returncode == 1
    assert result.stderr.strip().startswith(
        f"pull_model: FAILED: The model hub at {hub.url} failed (HTTP 500), a fault on its side"
    )
    assert not (share / "testorg--tiny-sd" / ".manifest.json").exists()


def test_model_status_of_a_running_service(model_env):
    """The service served in this process (served_here), asked as a client process asks it."""
    with served_here(**model_env) as app:
        result = run_beside("model_status", "--base-url", app.base_url, "--json")
        plain = run_beside("model_status", "--base-url", app.base_url)
    assert result.returncode == 0
    assert json.loads(result.stdout)["state"] == "not_started"
    assert plain.returncode == 0, plain.stderr
    assert "state: not_started" in [line.strip() for line in plain.stdout.splitlines()]


def assert_one_line_failure(result, text: str) -> None:
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.startswith("model_status: ") and text in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr  # no traceback


def test_model_status_of_a_service_that_does_not_answer_is_one_line():
    url = f"http://127.0.0.1:{free_port()}"
    result = run_command("model_status", "--base-url", url, "--json")
    assert_one_line_failure(result, f"{url} unreachable")


def test_model_status_of_a_service_answering_an_error_is_one_line():
    with ScriptedService({"GET /model/status": [Reply(503, {"detail": "unavailable"})]}) as svc:
        result = run_command("model_status", "--base-url", svc.base_url, "--json")
    assert_one_line_failure(result, "/model/status answered 503")


def test_generate_command_writes_a_png(model_env, tmp_path):
    assert run_command("pull_model", env=model_env).returncode == 0
    out = tmp_path / "check.png"
    # The real process of generate: a fresh process imports torch and diffusers, loads the
    # model and generates (in this process torch is already imported and set up).
    result = manage("generate", "a test", "--out", str(out), "--seed", "5", env=model_env)
    assert result.returncode == 0, result.stderr
    assert out.read_bytes().startswith(b"\x89PNG")
    assert "seed 5" in result.stdout
    bad = run_command("generate", "x", "--steps", "0", env=model_env)
    assert bad.returncode != 0 and "steps" in bad.stderr


def test_generate_command_edits_an_image_with_a_mask(model_env, tmp_path):
    assert run_command("pull_model", env=model_env).returncode == 0
    pixels = np.random.default_rng(3).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    Image.fromarray(pixels, "RGB").save(tmp_path / "in.png")
    mask = Image.new("L", (64, 64))
    mask.paste(255, (24, 24, 40, 40))
    mask.save(tmp_path / "m.png")
    out = tmp_path / "edited.png"
    result = run_command("generate", "a door", "--image", str(tmp_path / "in.png"), "--mask",
                         str(tmp_path / "m.png"), "--strength", "0.6", "--steps", "5",
                         "--out", str(out), env=model_env)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "64x64" in result.stdout and "3 of 5 steps (strength 0.6)" in result.stdout
    edited = np.asarray(Image.open(out).convert("RGB"))
    assert (edited[:12] == pixels[:12]).all()  # far from the square: the input's
    assert (edited[24:40, 24:40] != pixels[24:40, 24:40]).any()
    for args, said in (
        (["--strength", "1.5"], "strength: must be greater than 0 and at most 1"),
        (["--image", str(tmp_path / "missing.png")], "cannot read"),
    ):
        bad = run_command("generate", "x", "--image", str(tmp_path / "in.png"), *args,
                          env=model_env)  # fmt: skip
        assert bad.returncode != 0 and said in bad.stderr, bad.stderr
    alone = run_command("generate", "x", "--mask", str(tmp_path / "m.png"), env=model_env)
    assert alone.returncode != 0 and "--mask: applies to an edit only" in alone.stderr


def test_pull_model_force_downloads_again_although_complete(model_env, hub, share):
    assert run_command("pull_model", env=model_env).returncode == 0
    first = sorted(hub.file_gets())
    hub.reset_log()

    forced = run_command("pull_model", "--force", env=model_env)
    assert forced.returncode == 0, forced.stderr
    assert "nothing to download" not in forced.stdout
    assert sorted(hub.file_gets()) == first  # every file fetched from the hub again
    status = json.loads(run_command("model_status", "--json", env=model_env).stdout)
    assert status["complete"] is True and status["files"] == 12
    assert run_command("pull_model", "--check", env=model_env).returncode == 0


def test_pull_model_fetches_the_adapters_and_decoder_and_check_verifies_them(
    model_env, hub, hub_root, share
):
    build_adapter_repos(hub_root, sd_repo=SD_REPO, sdxl_repo=SDXL_REPO)
    env = model_env | {"MODEL_ADAPTERS": f"{LORA_REPO}:{KOHYA_FILE}", "VAE_DECODER": "tiny"}
    extras = f"(with adapter {LORA_REPO}:{KOHYA_FILE}, decoder {TAESD_REPO})"
    cold = run_command("pull_model", env=env)
    assert cold.returncode == 0, cold.stderr
    assert f"{SD_REPO}@{hub.commit(SD_REPO)[:12]}: 15 files" in cold.stdout  # 12 + 1 + 2
    assert cold.stdout.strip().endswith(extras)
    check = run_command("pull_model", "--check", env=env)
    assert check.returncode == 0, check.stderr
    assert f"{extras} match the hub's sizes and hashes" in check.stdout
    assert (
        json.loads(run_command("model_status", "--json", env=model_env).stdout)["complete"] is False
    )

    hub.reset_log()
    forced = run_command("pull_model", "--force", env=env)
    assert forced.returncode == 0, forced.stderr
    fetched = hub.file_gets()
    assert f"/{LORA_REPO}/resolve/{hub.commit(LORA_REPO)}/{KOHYA_FILE}" in fetched
    assert sum(f"/{TAESD_REPO}/resolve/" in path for path in fetched) == 2

    model = share / "testorg--tiny-sd"
    adapter = model / "adapters" / "testorg--tiny-lora" / KOHYA_FILE
    data = bytearray(adapter.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other content
    adapter.write_bytes(bytes(data))
    config = model / "decoders" / "madebyollin--taesd" / "config.json"
    config.write_text(config.read_text()[:-10])
    broken = run_command("pull_model", "--check", env=env)
    assert broken.returncode == 1
    assert f"adapters/testorg--tiny-lora/{KOHYA_FILE}: sha256 differs" in broken.stderr
    assert "decoders/madebyollin--taesd/config.json: size" in broken.stderr
    assert "unet/" not in broken.stderr


def test_run_command_answers_as_the_real_process(model_env, share):
    """run_command's exit code, stdout and stderr are the real process's: on an empty share
    (model_status's real process), then for --check with a corrupted file (exit 1, stderr
    naming it). Afterwards this process has its own settings and backend again."""

    def both(*args: str) -> tuple[tuple, tuple]:
        real = manage(*args, env=model_env)
        here = run_command(*args, env=model_env)
        return (real.returncode, real.stdout, real.stderr), astuple(here)

    real, here = both("model_status", "--json")
    assert real[0] == 0 and json.loads(real[1])["complete"] is False
    assert here == real

    assert run_command("pull_model", env=model_env).returncode == 0
    weights = share / "testorg--tiny-sd" / "unet" / "diffusion_pytorch_model.fp16.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    real, here = both("pull_model", "--check")
    assert real[0] == 1 and "sha256 differs" in real[2]
    assert here == real

    assert share != settings.MODEL_DIR
    assert backend.model_source().model_dir == settings.MODEL_DIR
    assert backend.current_backend().loader.source.model_dir == settings.MODEL_DIR
