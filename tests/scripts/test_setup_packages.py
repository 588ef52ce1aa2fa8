"""The set-up installs PyTorch's CPU build and never a CUDA one: the pin says `+cpu`, what the
set-up installed from its real sources (as scripts/install_requirements asks them) holds no CUDA
package, where pip's own sources lack the CPU build PyTorch's CPU wheel index is added by
itself (a stand-in on 127.0.0.1 here: nothing is downloaded), and where no source has the CPU
build the install stops naming it.

The set-up's own install is read from this venv, which ./scripts/test installed; the other
cases are pip's own plans (`--dry-run --report`, so nothing is installed) from sources of their
own (wheels that hold only a name and a version), and run in about a second.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import distributions
from pathlib import Path

from tests.support.processes import ROOT, free_port, wait_for_http

INSTALLER = ROOT / "scripts" / "install_requirements"
BASE = ROOT / "requirements" / "base.txt"
PYPROJECT = ROOT / "pyproject.toml"
CUDA_PACKAGE = re.compile(r"^nvidia-|^cuda|triton")  # pytorch-triton too


def torch_pin() -> str:
    (line,) = [line for line in BASE.read_text().splitlines() if line.startswith("torch==")]
    return line


def install(
    *args: str, env: dict[str, str] | None = None, installer: Path = INSTALLER
) -> subprocess.CompletedProcess:
    """scripts/install_requirements with this interpreter, as bootstrap.sh runs it."""
    return subprocess.run(
        [str(installer), sys.executable, "--quiet", *args],
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


def normalized(name: str) -> str:
    """A distribution's name as pip compares them (hf_xet is hf-xet)."""
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def pins(path: Path) -> dict[str, str]:
    """{name: version} of a requirements file's pins and those of the files it takes whole."""
    found: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("-r "):
            found |= pins(path.parent / line.removeprefix("-r ").strip())
        elif line:
            name, version = line.split("==")
            found[normalized(name)] = version.strip()
    return found


def test_the_setups_install_holds_torchs_cpu_build_and_no_cuda_package():
    """dev.txt is what ./scripts/test installs; it takes local.txt (./scripts/serve's) and
    base.txt (the container's) in whole. ./scripts/test installs it into this venv from pip's
    real sources before the tests run (scripts/bootstrap.sh, again whenever requirements/
    changes), so what is installed here is the set-up's plan as pip made it: asking the
    sources again (pip --dry-run, about 20 s of a mirror's long pages) would tell nothing more."""
    wanted = pins(ROOT / "requirements" / "dev.txt")
    assert wanted["torch"] == torch_pin().removeprefix("torch==")
    assert {"django", "diffusers", "pytest", "secantusdb"} <= set(wanted)  # all three files
    installed = {normalized(dist.metadata["Name"]): dist.version for dist in distributions()}
    assert {name: installed.get(name) for name in wanted} == wanted
    assert [name for name in installed if CUDA_PACKAGE.match(name)] == []


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
    no_cpu_index = simple_index(tmp_path / "cpu")  # the fallback, without the build either
    report = tmp_path / "report.json"
    done = install("--dry-run", "--ignore-installed", "--report", str(report), "-r",
                   requirements(tmp_path, "tqdm==4.70.1", torch_pin()),
                   env=own_sources(tmp_path, index, TORCH_INDEX_URL=no_cpu_index))  # fmt: skip
    assert done.returncode == 1
    assert not report.exists()
    message = done.stderr[done.stderr.index(f"{torch_pin()} (PyTorch's CPU build)") :]
    assert "is in none of pip's sources: its configured index" in message
    assert f"PyTorch's CPU wheel index at {no_cpu_index}" in message
    assert "Set TORCH_INDEX_URL to a CPU wheel index that holds it" in message


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
    assert f"taking it from PyTorch's CPU wheel index, {cpu_index}" in done.stderr


DEFAULT_INDEX = re.compile(r'torch_index="\$\{TORCH_INDEX_URL:-(\S+)\}"')


def test_the_fallback_is_pytorchs_cpu_index_and_never_a_cuda_one():
    (address,) = DEFAULT_INDEX.findall(INSTALLER.read_text())
    assert re.fullmatch(r"https://[a-z.]+/whl/cpu", address), address


@contextmanager
def stand_in_index(root: Path, log: Path) -> Iterator[str]:
    """A PEP 503 index served over HTTP on 127.0.0.1 (python -m http.server), its requests in
    `log`."""
    port = free_port()
    with log.open("wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port),
             "--directory", str(root)],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_for_http(f"http://127.0.0.1:{port}/", 30, server)
        yield f"http://127.0.0.1:{port}/simple"
    finally:
        server.terminate()
        server.wait(10)


def installer_falling_back_to(tmp_path: Path, address: str) -> Path:
    """scripts/install_requirements as it is but for its default CPU index, the stand-in's
    address: the fallback that happens with TORCH_INDEX_URL unset, without the network."""
    (tmp_path / "scripts").mkdir(parents=True)
    (tmp_path / "requirements").mkdir()
    shutil.copy(BASE, tmp_path / "requirements" / "base.txt")
    text = INSTALLER.read_text()
    (default,) = DEFAULT_INDEX.findall(text)
    copy = tmp_path / "scripts" / "install_requirements"
    copy.write_text(text.replace(default, address))
    copy.chmod(0o755)
    return copy


def test_without_the_cpu_build_in_pips_sources_it_takes_pytorchs_cpu_index_by_itself(
    tmp_path: Path,
):
    version = torch_pin().removeprefix("torch==")
    release = version.split("+")[0]
    # pip's own index: the public index's torch (the build that pulls CUDA), not the pin.
    index = simple_index(tmp_path / "index", ("torch", release), ("tqdm", "4.70.1"))
    simple_index(tmp_path / "cpu" / "simple", ("torch", version))
    log = tmp_path / "http.log"
    env = own_sources(tmp_path, index)
    env.pop("TORCH_INDEX_URL", None)
    with stand_in_index(tmp_path / "cpu", log) as address:
        installer = installer_falling_back_to(tmp_path / "copy", address)
        report = tmp_path / "report.json"
        done = install("--dry-run", "--ignore-installed", "--report", str(report), "-r",
                       requirements(tmp_path, "tqdm==4.70.1", torch_pin()),
                       env=env, installer=installer)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert planned(report) == {"torch": version, "tqdm": "4.70.1"}
    assert (
        f"{torch_pin()} is not in pip's own sources: taking it from PyTorch's CPU wheel index, "
        f"{address} (TORCH_INDEX_URL picks another)"
    ) in done.stderr
    assert "GET /simple/torch/" in log.read_text()


def test_with_the_cpu_build_in_pips_sources_the_cpu_index_is_not_asked(tmp_path: Path):
    version = torch_pin().removeprefix("torch==")
    index = simple_index(tmp_path / "index", ("torch", version), ("tqdm", "4.70.1"))
    simple_index(tmp_path / "cpu" / "simple", ("torch", version))
    log = tmp_path / "http.log"
    env = own_sources(tmp_path, index)
    env.pop("TORCH_INDEX_URL", None)
    with stand_in_index(tmp_path / "cpu", log) as address:
        installer = installer_falling_back_to(tmp_path / "copy", address)
        report = tmp_path / "report.json"
        done = install("--dry-run", "--ignore-installed", "--report", str(report), "-r",
                       requirements(tmp_path, "tqdm==4.70.1", torch_pin()),
                       env=env, installer=installer)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert planned(report) == {"torch": version, "tqdm": "4.70.1"}
    assert "PyTorch's CPU wheel index" not in done.stderr
    assert "/simple/torch/" not in log.read_text()


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
    empty = simple_index(tmp_path / "empty")
    nothing = own_sources(tmp_path, empty, PIP_IGNORE_INSTALLED="1", TORCH_INDEX_URL=empty)
    failed = bootstrap(venv, nothing)
    assert failed.returncode == 1
    # Minutes of pip with --quiet: said before it starts.
    assert (
        f"setting up {venv}: installing the packages pinned in requirements/dev.txt "
        "(about 1.7 GB, torch the largest): a few minutes the first time"
    ) in failed.stderr
    assert f"{torch_pin()} (PyTorch's CPU build) is in none of pip's sources" in failed.stderr
    assert not stamp.exists()
    # Everything already there (this venv's packages): installed, stamped, then skipped.
    assert bootstrap(venv, own_sources(tmp_path, empty, TORCH_INDEX_URL=empty)).returncode == 0
    assert stamp.exists()
    calls.write_text("")
    skipped = bootstrap(venv, dict(os.environ))
    assert skipped.returncode == 0
    assert calls.read_text() == ""  # nothing changed: pip not run
    assert "installing" not in skipped.stderr


def pretend_python(tmp_path: Path, version: str) -> Path:
    """An interpreter that says it is `version` and stops at `-m venv` (exit 7), saying so."""
    path = tmp_path / f"python{version}"
    path.write_text(
        f'#!/bin/sh\nif [ "$1" = -c ]; then echo {version}; exit 0; fi\n'
        'echo "asked: $*" >&2\nexit 7\n'
    )
    path.chmod(0o755)
    return path


def test_the_bootstrap_takes_python_3_11_to_3_13_and_names_them_for_any_other(tmp_path: Path):
    requires = re.search(r'^requires-python = "(.*)"$', PYPROJECT.read_text(), re.M)
    assert requires is not None and requires.group(1) == ">=3.11,<3.14"
    for version in ("3.11", "3.12", "3.13"):
        python = pretend_python(tmp_path, version)
        venv = tmp_path / f"venv-{version}"
        done = bootstrap(venv, {**os.environ, "PYTHON": str(python)})
        assert (done.returncode, done.stderr) == (7, f"asked: -m venv {venv}\n")
    for version in ("3.10", "3.14"):
        python = pretend_python(tmp_path, version)
        done = bootstrap(tmp_path / f"venv-{version}", {**os.environ, "PYTHON": str(python)})
        assert (done.returncode, done.stderr) == (
            1,
            f"Python 3.11, 3.12 or 3.13 is needed; {python} is {version} (PYTHON picks another)\n",
        )


def test_the_lint_refuses_the_standard_modules_python_3_12_and_3_13_removed(tmp_path: Path):
    """Only 3.11 runs here: the newer versions are checked statically, by ruff's banned-api."""
    source = tmp_path / "old.py"
    source.write_text("import imp\nimport pipes\nimport shlex\n")
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--config", str(PYPROJECT),
         "--output-format", "concise", str(source)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert "`imp` is banned: removed in Python 3.12" in done.stdout
    assert "`pipes` is banned: removed in Python 3.13" in done.stdout
    assert done.stdout.count("TID251") == 2  # shlex stays


def test_readme_names_the_debian_packages_the_test_command_installs():
    script = (ROOT / "scripts" / "system_packages.sh").read_text()
    packages = re.findall(r"missing\+=\(([\w.-]+)\)", script)
    assert packages, script
    readme = (ROOT / "README.md").read_text()
    setup = readme[readme.index("## Two commands") : readme.index("```sh")]
    assert "`./scripts/test` also installs the Debian packages its tests drive with `apt-get`" in (
        " ".join(setup.split())
    )
    for package in packages:
        assert f"`{package}`" in setup, package
