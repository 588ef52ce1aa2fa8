"""tests/ mirrors the code's folders, so a behaviour's tests are found by the folder of the code
that decides it."""

from pathlib import Path

from tests.support.processes import ROOT

# Test folders that are not a code folder, and why.
OWN_FOLDERS = {
    "support": "what the tests build: the tiny model, the local hub, processes",
    "imagegen/api/clients": "the real clients against every protocol, sharing one app",
}


def test_every_test_folder_mirrors_a_code_folder():
    tests = ROOT / "tests"
    strays = []
    for folder in sorted({p.parent for p in tests.rglob("test_*.py")}):
        relative = folder.relative_to(tests).as_posix()
        if folder == tests or relative in OWN_FOLDERS or relative.startswith("support"):
            continue
        if not (ROOT / relative).is_dir():
            strays.append(relative)
    assert not strays, f"test folders with no code folder of that name: {strays}"


def test_no_test_module_sits_in_an_app_packages_root_when_the_app_has_layers():
    """imagegen's tests sit in the folder of their layer (api, generation, model ...)."""
    loose = sorted(p.name for p in (ROOT / "tests" / "imagegen").glob("test_*.py"))
    assert not loose, f"tests/imagegen/ holds modules outside a layer's folder: {loose}"


def test_the_own_folders_exist():
    missing = [f for f in OWN_FOLDERS if not (ROOT / "tests" / f).is_dir()]
    assert not missing, missing
    assert Path(ROOT / "tests" / "imagegen" / "api" / "clients" / "conftest.py").is_file()
