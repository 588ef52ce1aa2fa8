"""manage.py pull_model --model / --all / --remove: one offered model, every one, or one
deleted from the share, run in this process as an operator's manage.py runs it
(tests/support/commands.py)."""

from pathlib import Path

from imagegen.model import share
from tests.support.commands import run_command
from tests.support.model_service import SD_REPO, SDXL_REPO, model_service_env


def complete(model_dir: Path, model_id: str) -> bool:
    return share.read_manifest(share.model_path(model_dir, model_id)) is not None


def test_pull_model_pulls_one_offered_model_then_all_then_removes_one(hub, share, tmp_path):
    env = {**model_service_env(hub.url, share, tmp_path), "MODELS": SDXL_REPO}

    one = run_command("pull_model", "--model", "tiny-sdxl", env=env)
    assert one.returncode == 0, one.stderr
    assert f"{SDXL_REPO}@" in one.stdout
    assert complete(share, SDXL_REPO) and not complete(share, SD_REPO)

    every = run_command("pull_model", "--all", env=env)
    assert every.returncode == 0, every.stderr
    assert complete(share, SD_REPO)
    assert f"{SDXL_REPO}@" in every.stdout and "nothing to download" in every.stdout

    unknown = run_command("pull_model", "--model", "dall-e-3", env=env)
    assert unknown.returncode == 1
    assert f"--model 'dall-e-3' is not offered; offered: {SD_REPO}, {SDXL_REPO}" in unknown.stderr

    default = run_command("pull_model", "--remove", SD_REPO, env=env)
    assert default.returncode == 1 and "is MODEL_ID" in default.stderr
    assert complete(share, SD_REPO)

    removed = run_command("pull_model", "--remove", SDXL_REPO, env=env)
    assert removed.returncode == 0, removed.stderr
    assert f"{SDXL_REPO}: removed" in removed.stdout
    assert not share.joinpath("testorg--tiny-sdxl").exists() and complete(share, SD_REPO)
    again = run_command("pull_model", "--remove", SDXL_REPO.split("/")[1], env=env)  # by name
    assert again.returncode == 0 and "nothing to remove" in again.stdout
    # A model this deployment does not offer may be another's on a shared share.
    foreign = run_command("pull_model", "--remove", "otherorg/their-model", env=env)
    assert foreign.returncode != 0 and "--force" in foreign.stderr, foreign.stderr
    forced = run_command("pull_model", "--remove", "otherorg/their-model", "--force", env=env)
    assert forced.returncode == 0 and "nothing to remove" in forced.stdout, forced.stderr
