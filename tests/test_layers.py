"""The import graph of the project is a tree of layers: config (the wiring) over the apps,
imagegen and todos (which never import each other), over apikeys, over core (the shared
kernel); inside imagegen, api -> services and selectors -> backend -> distributed ->
generation -> model. A lower module that reaches up (the model's loader asking for the
distributed model, as it once did) makes a circle, and every change to either side then drags
the other along. import-linter holds the layers and the absence of circles (pyproject.toml's
contracts, run by ./scripts/test); the tests here show that it fails when a layer is crossed,
and hold the rules that are not layers."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import ROOT

PACKAGES = ("apikeys", "config", "core", "imagegen", "todos")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {
        module_name(path): path
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts
    }


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-logo", "--no-cache"], cwd=root, capture_output=True,
        text=True, timeout=300, check=False, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip


def test_the_contracts_hold():
    run = lint_imports(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "3 kept, 0 broken" in run.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        # core reaching up into the configuration
        ("core/text.py", "import config.settings", "config > imagegen | todos > apikeys > core"),
        # one app importing the other
        ("todos/selectors.py", "import imagegen.errors", "config > imagegen | todos"),
        # apikeys reaching up into an app
        ("apikeys/errors.py", "import todos.errors", "config > imagegen | todos"),
        # an app reaching up into the wiring
        ("imagegen/errors.py", "import config.urls", "config > imagegen | todos"),
        # the model asking for the distributed mode, inside a function
        (
            "imagegen/model/device.py",
            "def _up():\n    from imagegen.distributed import board",
            "imagegen: api, ui, management",
        ),
        # a circle between two modules no layer names
        ("todos/selectors.py", "import todos.api", "no import circle"),
    ],
)
def test_lint_imports_fails_when_a_layer_is_crossed(tmp_path, module, line, contract):
    """A copy of the project with one import added where its layer forbids it."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    target = tmp_path / module
    target.write_text(target.read_text() + "\n" + line + "\n")
    run = lint_imports(tmp_path)
    assert run.returncode != 0, run.stdout
    broken = [part for part in run.stdout.split("\n") if part.endswith("BROKEN")]
    assert any(contract in part for part in broken), run.stdout


def test_only_the_backend_chooses_the_job_mode():
    """JOB_BROKER_URL is read by the settings, the backend, and the places that must know the
    process's role before any backend exists (the WSGI start-up, the worker command, the
    Celery app and the Redis connection), never by a job board, a loader or a service."""
    readers = sorted(
        name
        for name, path in project_modules().items()
        if "settings.JOB_BROKER_URL" in path.read_text()
        or 'env_str("JOB_BROKER_URL"' in path.read_text()
    )
    assert readers == [
        "config.settings",
        "config.wsgi",
        "imagegen.backend",
        "imagegen.distributed.celery_app",
        "imagegen.distributed.connection",
        "imagegen.management.commands.run_worker",
    ]


BUILD_BACKEND = """
import sys, django
django.setup()
from imagegen import backend
backend.current_backend()
print(sorted(m for m in sys.modules if m.startswith("imagegen.distributed")))
"""


def test_the_in_process_backend_imports_no_distributed_module():
    """backend.py imports the distributed modules only when JOB_BROKER_URL chooses them."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "DEVICE": "cpu"}
    env.pop("JOB_BROKER_URL", None)
    run = subprocess.run(
        [sys.executable, "-c", BUILD_BACKEND], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=120, check=True,
    )  # fmt: skip
    assert run.stdout.strip().splitlines()[-1] == "[]", run.stdout


def test_the_test_command_type_checks_and_ends_with_the_slowest_tests():
    """README: ./scripts/test runs mypy (failing on its report) and prints the 25 slowest."""
    script = (ROOT / "scripts" / "test").read_text()
    assert 'if ! report="$(mypy 2>&1)"; then echo "$report" >&2; exit 1; fi' in script
    command = 'exec python -m pytest -n "${TEST_WORKERS:-3}" --dist loadgroup --durations=25 "$@"'
    assert command in script


LINT_IMPORTS_LINE = "lint-imports --no-logo"
DUPLICATE_CODE_LINE = (
    "pylint --disable=all --enable=duplicate-code --min-similarity-lines=6 --ignore-imports=y "
    "--ignore-docstrings=y --ignore-comments=y config core imagegen todos apikeys"
)


def test_the_test_command_checks_the_layers_and_repeated_code():
    """./scripts/test runs import-linter's contracts and pylint's duplicate-code check."""
    script = (ROOT / "scripts" / "test").read_text().splitlines()
    assert LINT_IMPORTS_LINE in script
    assert DUPLICATE_CODE_LINE in script
