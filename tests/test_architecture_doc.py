"""docs/architecture.md is held to the tree: it names every module of the app packages, and
every module or folder it names exists.

A path in backticks counts from the repository's root, or from the first folder its table row
names (`status.py` in the `imagegen/model/` row). A dotted name (`imagegen.model.loader`)
counts as its file. Management commands may be named by their folder."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "architecture.md"
PACKAGES = ("apikeys", "config", "imagegen", "scripts", "todos")
COMMANDS = "management/commands/"


def app_modules(root: Path = ROOT) -> set[str]:
    """Every module of the app packages, but `__init__.py` and migrations."""
    return {
        path.relative_to(root).as_posix()
        for package in PACKAGES
        for path in (root / package).rglob("*.py")
        if path.name != "__init__.py" and "migrations" not in path.parts
    }


def named(text: str, root: Path = ROOT) -> tuple[set[str], list[str]]:
    """The paths the page names that exist, and the names that reach nothing."""
    found: set[str] = set()
    missing: list[str] = []
    for line in text.splitlines():
        tokens = re.findall(r"`([^`\s]+)`", line)
        folders = [t for t in tokens if t.endswith("/") and (root / t).is_dir()]
        base = folders[0] if line.startswith("|") and folders else ""
        for token in tokens:
            if re.fullmatch(r"[a-z_]+(\.[a-z_]+)+", token) and token.split(".")[0] in PACKAGES:
                token = token.replace(".", "/") + ".py"
            if not re.fullmatch(r"\w[\w./-]*(\.py|/)", token):
                continue
            candidates = [base + token, token] if base else [token]
            hit = next((c for c in candidates if (root / c).exists()), None)
            if hit is None:
                missing.append(token)
            else:
                found.add(hit)
    return found, missing


def unnamed(modules: set[str], found: set[str]) -> set[str]:
    def covered(module: str) -> bool:
        folder = module.rpartition("/")[0] + "/"
        return module in found or (folder.endswith(COMMANDS) and folder in found)

    return {module for module in modules if not covered(module)}


def test_the_page_names_every_module_of_the_app_packages():
    found, _ = named(PAGE.read_text())
    left_out = unnamed(app_modules(), found)
    assert not left_out, f"docs/architecture.md does not name: {sorted(left_out)}"


def test_every_module_the_page_names_exists():
    _, missing = named(PAGE.read_text())
    assert not missing, f"docs/architecture.md names what is not in the tree: {missing}"


def test_a_module_left_out_or_a_gone_one_named_is_caught():
    text = PAGE.read_text()
    found, _ = named(text.replace("`memory.py`", "`memory_gone.py`"))
    assert "imagegen/model/memory.py" in unnamed(app_modules(), found)
    _, missing = named(text + "\n| `imagegen/model/` | `gone.py` |\n")
    assert "gone.py" in missing
    commands, _ = named("| `imagegen/management/commands/` | the commands |")
    assert not unnamed({"imagegen/management/commands/gate.py"}, commands)
