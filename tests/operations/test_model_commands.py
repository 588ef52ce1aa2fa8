"""manage.py pull_model (cold, warm, --check), model_status and generate as operators run them."""

import json

from tests.support.commands import manage
from tests.support.model_service import SD_REPO


def test_pull_model_cold_then_warm_then_check(model_env, hub, share):
    before = manage("model_status", "--json", env=model_env)
    assert before.returncode == 0
    assert json.loads(before.stdout)["complete"] is False

    cold = manage("pull_model", env=model_env)
    assert cold.returncode == 0, cold.stderr
    assert f"{SD_REPO}@{hub.commit(SD_REPO)[:12]}: 12 files" in cold.stdout
    assert (share / "testorg--tiny-sd" / ".manifest.json").exists()

    hub.reset_log()
    warm = manage("pull_model", env=model_env)
    assert warm.returncode == 0
    assert "is complete on the share" in warm.stdout
    assert hub.requests == []

    status = json.loads(manage("model_status", "--json", env=model_env).stdout)
    assert status["complete"] is True and status["files"] == 12
    assert status["commit"] == hub.commit(SD_REPO)

    check = manage("pull_model", "--check", env=model_env)
    assert check.returncode == 0, check.stderr
    assert "match the hub's sizes and hashes" in check.stdout


def test_check_names_each_corrupted_file(model_env, share):
    assert manage("pull_model", env=model_env).returncode == 0
    model = share / "testorg--tiny-sd"
    weights = model / "unet" / "diffusion_pytorch_model.fp16.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other content
    weights.write_bytes(bytes(data))
    config = model / "vae" / "config.json"
    config.write_text(config.read_text()[:-10])  # truncated

    check = manage("pull_model", "--check", env=model_env)
    assert check.returncode == 1
    assert "unet/diffusion_pytorch_model.fp16.safetensors: sha256 differs" in check.stderr
    assert "vae/config.json: size" in check.stderr
    assert "text_encoder" not in check.stderr


def test_pull_model_fails_with_one_clear_line_on_a_hub_error(model_env, hub, share):
    hub.fail_status = 500
    result = manage("pull_model", env=model_env)
    assert result.returncode == 1
    assert result.stderr.strip().startswith("pull_model: FAILED:")
    assert not (share / "testorg--tiny-sd" / ".manifest.json").exists()


def test_model_status_of_a_running_service(start_app):
    app = start_app()
    result = manage("model_status", "--base-url", app.base_url, "--json")
    assert result.returncode == 0
    assert json.loads(result.stdout)["state"] == "not_started"


def test_generate_command_writes_a_png(model_env, tmp_path):
    assert manage("pull_model", env=model_env).returncode == 0
    out = tmp_path / "check.png"
    result = manage("generate", "a test", "--out", str(out), "--seed", "5", env=model_env)
    assert result.returncode == 0, result.stderr
    assert out.read_bytes().startswith(b"\x89PNG")
    assert "seed 5" in result.stdout
    bad = manage("generate", "x", "--steps", "0", env=model_env)
    assert bad.returncode != 0 and "steps" in bad.stderr
