"""manage.py pull_model (cold, warm, --force, --check), model_status (the share, or a service
by --base-url) and generate as operators run them."""

import json

from tests.support.commands import manage
from tests.support.model_service import SD_REPO
from tests.support.processes import free_port
from tests.support.scripted_service import Reply, ScriptedService


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
    model = share / "testorg--tiny-sd"
    placed = [f for f in model.rglob("*") if f.is_file() and f.name != ".manifest.json"]
    assert len(placed) == 12 and status["bytes"] == sum(f.stat().st_size for f in placed)

    plain = manage("model_status", env=model_env)  # the same state, one "key: value" a line
    assert plain.returncode == 0, plain.stderr
    lines = dict(line.strip().split(": ", 1) for line in plain.stdout.splitlines())
    assert {key: lines[key] for key in ("complete", "commit", "files", "bytes")} == {
        "complete": "True",
        "commit": hub.commit(SD_REPO),
        "files": "12",
        "bytes": str(status["bytes"]),
    }

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
    plain = manage("model_status", "--base-url", app.base_url)
    assert plain.returncode == 0, plain.stderr
    assert "state: not_started" in [line.strip() for line in plain.stdout.splitlines()]


def assert_one_line_failure(result, text: str) -> None:
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.startswith("model_status: ") and text in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr  # no traceback


def test_model_status_of_a_service_that_does_not_answer_is_one_line():
    url = f"http://127.0.0.1:{free_port()}"
    result = manage("model_status", "--base-url", url, "--json")
    assert_one_line_failure(result, f"{url} unreachable")


def test_model_status_of_a_service_answering_an_error_is_one_line():
    with ScriptedService({"GET /model/status": [Reply(503, {"detail": "unavailable"})]}) as svc:
        result = manage("model_status", "--base-url", svc.base_url, "--json")
    assert_one_line_failure(result, "/model/status answered 503")


def test_generate_command_writes_a_png(model_env, tmp_path):
    assert manage("pull_model", env=model_env).returncode == 0
    out = tmp_path / "check.png"
    result = manage("generate", "a test", "--out", str(out), "--seed", "5", env=model_env)
    assert result.returncode == 0, result.stderr
    assert out.read_bytes().startswith(b"\x89PNG")
    assert "seed 5" in result.stdout
    bad = manage("generate", "x", "--steps", "0", env=model_env)
    assert bad.returncode != 0 and "steps" in bad.stderr


def test_pull_model_force_downloads_again_although_complete(model_env, hub, share):
    assert manage("pull_model", env=model_env).returncode == 0
    first = sorted(hub.file_gets())
    hub.reset_log()

    forced = manage("pull_model", "--force", env=model_env)
    assert forced.returncode == 0, forced.stderr
    assert "nothing to download" not in forced.stdout
    assert sorted(hub.file_gets()) == first  # every file fetched from the hub again
    status = json.loads(manage("model_status", "--json", env=model_env).stdout)
    assert status["complete"] is True and status["files"] == 12
    assert manage("pull_model", "--check", env=model_env).returncode == 0
