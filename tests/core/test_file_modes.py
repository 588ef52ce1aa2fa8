"""What the service writes is its own user's alone: new files 0600 in folders 0700, from
manage.py (a pull by the operator's command) here; from gunicorn's worker (a pull and a
generation: the model, the image, its record) on the plain start's gunicorn
(tests/config/test_plain_gunicorn.py test_what_its_worker_writes_is_its_user_alone)."""

import stat
from pathlib import Path

from tests.support.commands import manage


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


def test_the_operators_commands_write_files_their_user_alone_reads(model_env, share: Path):
    pulled = manage("pull_model", env=model_env, timeout=300)
    assert pulled.returncode == 0, pulled.stderr
    assert_private(modes_beneath(share))
