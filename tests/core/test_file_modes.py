"""What the service writes is its own user's alone: new files 0600 in folders 0700, from
gunicorn's worker (a pull and a generation: the model, the image, its record) and from
manage.py (a pull by the operator's command)."""

import stat
from pathlib import Path

import requests

from tests.support.commands import manage
from tests.support.model_service import pull_until_ready


def modes_beneath(*roots: Path) -> dict[str, int]:
    """Every file and folder below the roots (not the roots: the test made those)."""
    return {
        str(path): stat.S_IMODE(path.stat().st_mode)
        for root in roots
        for path in root.rglob("*")
        if not path.is_symlink()
    }


def assert_private(modes: dict[str, int]) -> None:
    assert modes, "nothing was written"
    loose = {path: oct(mode) for path, mode in modes.items() if mode & 0o077}
    assert not loose, loose
    assert all(mode == 0o700 for path, mode in modes.items() if Path(path).is_dir())


def test_the_web_process_writes_files_its_user_alone_reads(start_app, share: Path, tmp_path):
    app = start_app()
    pull_until_ready(app)
    made = requests.post(app.url("/generate"), data={"prompt": "private", "size": "64x64"})
    assert made.status_code == 200, made.text
    images = tmp_path / "images"
    assert list(images.glob("*.png")) and list(images.glob("*.json"))
    assert_private(modes_beneath(share, images))


def test_the_operators_commands_write_files_their_user_alone_reads(model_env, share: Path):
    pulled = manage("pull_model", env=model_env, timeout=300)
    assert pulled.returncode == 0, pulled.stderr
    assert_private(modes_beneath(share))
