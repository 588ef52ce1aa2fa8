"""The set-up installs PyTorch's CPU build and never a CUDA one: the pin says `+cpu`, pip's plan
for the set-up (its real sources, as scripts/install_requirements asks them) holds no CUDA
package, and where no source has the CPU build the install stops naming it.

The plan is pip's own (`--dry-run --report`), so nothing is installed; the other cases give pip
sources of their own (wheels that hold only a name and a version) and run in about a second.
"""

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.support.processes import ROOT

INSTALLER = ROOT / "scripts" / "install_requirements"
BASE = ROOT / "requirements" / "base.txt"
CUDA_PACKAGE = re.compile(r"^nvidia-|^cuda|triton")  # pytorch-triton too


def torch_pin() -> str:
    (line,) = [line for line in BASE.read_text().splitlines() if line.startswith("torch==")]
    return line


def install(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """scripts/install_requirements with this interpreter, as bootstrap.sh runs it."""
    return subprocess.run(
        [str(INSTALLER), sys.executable, "--quiet", *args],
        cwd=ROOT, env=env or dict(os.environ), capture_output=True, text=True, timeout=240,
    )  # fmt: skip


def planned(report: Path) -> dict[str, str]:
    """{name: version} of what pip's report would install."""
    plan = json.loads(report.read_text())["install"]
    return {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in plan}


def test_the_pin_asks_for_torchs_cpu_build_and_no_other_file_pins_torch():
    assert re.fullmatch(r"torch==\d+\.\d+\.\d+\+cpu", torch_pin())
    others = [p for p in (ROOT / "requirements").glob("*.txt") if p != BASE]
    for path in others:
        assert not re.search(r"^torch\b", path.read_text(), re.M), path


def test_the_setups_plan_holds_torchs_cpu_build_and_no_cuda_package(tmp_path: Path):
    """dev.txt is what ./scripts/test installs; it takes local.txt (./scripts/serve's) and
    base.txt (the container's) in whole. pip asks its configured sources, as the set-up does:
    here a mirror and the public index, whose long pages make this pip take about 20 s."""
    report = tmp_path / "report.json"
    # One retry, not pip's five with backoff: offline, this fails in seconds, not minutes.
    done = install("--dry-run", "--ignore-installed", "--retries", "1", "--report", str(report),
                   "-r", "requirements/dev.txt")  # fmt: skip
    assert done.returncode == 0, done.stderr
    plan = planned(report)
    assert plan["torch"] == torch_pin().removeprefix("torch==")
    assert {"django", "diffusers", "pytest", "secantusdb"} <= set(plan)  # all three files
    assert [name for name in plan if CUDA_PACKAGE.match(name)] == []


def wheel(folder: Path, name: str, version: str) -> Path:
    """A wheel pip can plan with: its metadata and nothing else."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{f},,\n" for f in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
    return path


def simple_index(root: Path, *wheels: tuple[str, str]) -> str:
    """A file:// package index (PEP 503 layout) holding the given (name, version) wheels."""
    root.mkdir(parents=True, exist_ok=True)
    for name, version in wheels:
        built = wheel(root / name, name, version)
        (root / name / "index.html").write_text(f'<a href="{built.name}">{built.name}</a>\n')
    return root.as_uri()


def own_sources(tmp_path: Path, index_url: str, **extra: str) -> dict[str, str]:
    """pip configured with one index of the test's and nothing else of this machine's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    empty = tmp_path / "no-links"
    empty.mkdir(exist_ok=True)
    return {
        **env,
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": index_url,
        "PIP_FIND_LINKS": str(empty),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        **extra,
    }


def requirements(tmp_path: Path, *lines: str) -> str:
    path = tmp_path / "requirements.txt"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_with_no_source_of_the_cpu_build_it_stops_naming_it_and_takes_no_other_torch(
    tmp_path: Path,
):
    # pip's own index has torch at the pinned release, as the public index has it: the build
    # that pulls CUDA. The pin does not take it.
    release = torch_pin().removeprefix("torch==").split("+")[0]
    index = simple_index(tmp_path / "index", ("torch", release), ("tqdm", "4.70.1"))
    report = tmp_path / "report.json"
    done = install("--dry-run", "--ignore-installed", "--report", str(report), "-r",
                   requirements(tmp_path, "tqdm==4.70.1", torch_pin()),
                   env=own_sources(tmp_path, index))  # fmt: skip
    assert done.returncode == 1
    assert not report.exists()
    message = done.stderr[done.stderr.index(f"{torch_pin()} (PyTorch's CPU build)") :]
    assert "is in none of pip's sources" in message
    assert "Set TORCH_INDEX_URL to PyTorch's CPU wheel index" in message


def test_torch_index_url_adds_the_cpu_index_beside_pips_own(tmp_path: Path):
    version = torch_pin().removeprefix("torch==")
    index = simple_index(tmp_path / "index", ("tqdm", "4.70.1"))  # pip's own: no torch
    cpu_index = simple_index(tmp_path / "cpu", ("torch", version))
    report = tmp_path / "report.json"
    done = install("--dry-run", "--ignore-installed", "--report", str(report), "-r",
                   requirements(tmp_path, "tqdm==4.70.1", torch_pin()),
                   env=own_sources(tmp_path, index, TORCH_INDEX_URL=cpu_index))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert planned(report) == {"torch": version, "tqdm": "4.70.1"}


def test_a_failure_of_another_package_is_pips_own_and_says_nothing_of_torch(tmp_path: Path):
    index = simple_index(tmp_path / "index", ("torch", torch_pin().removeprefix("torch==")))
    done = install("--dry-run", "--ignore-installed", "-r",
                   requirements(tmp_path, "tqdm==4.70.1", torch_pin()),
                   env=own_sources(tmp_path, index))  # fmt: skip
    assert done.returncode == 1
    assert "No matching distribution found for tqdm==4.70.1" in done.stderr
    assert "TORCH_INDEX_URL" not in done.stderr


def fake_venv(tmp_path: Path) -> tuple[Path, Path]:
    """A venv whose python logs each call and runs this one (pip under PIP_DRY_RUN, so
    nothing is installed into the real one)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    calls = tmp_path / "calls.log"
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return venv, calls


def bootstrap(venv: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", "source scripts/bootstrap.sh requirements/dev.txt"],
        cwd=ROOT, env={**env, "VENV": str(venv), "PIP_DRY_RUN": "1"},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_bootstrap_installs_through_it_once_and_stops_when_torch_cannot_be_had(
    tmp_path: Path,
):
    venv, calls = fake_venv(tmp_path)
    stamp = venv / ".requirements-dev"
    # No source at all, as a fresh venv would see it: the message, and no stamp.
    nothing = own_sources(tmp_path, simple_index(tmp_path / "empty"), PIP_IGNORE_INSTALLED="1")
    failed = bootstrap(venv, nothing)
    assert failed.returncode == 1
    assert f"{torch_pin()} (PyTorch's CPU build) is in none of pip's sources" in failed.stderr
    assert not stamp.exists()
    # Everything already there (this venv's packages): installed, stamped, then skipped.
    assert bootstrap(venv, own_sources(tmp_path, simple_index(tmp_path / "empty"))).returncode == 0
    assert stamp.exists()
    calls.write_text("")
    assert bootstrap(venv, dict(os.environ)).returncode == 0
    assert calls.read_text() == ""  # nothing changed: pip not run
