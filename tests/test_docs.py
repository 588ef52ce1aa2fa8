"""The docs hold to the code: every environment variable the project reads is documented in
docs/configuration.md and every one documented there is read; README stays short; every
relative link in README.md and docs/*.md reaches a file (and a heading) that exists."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
CONFIGURATION = DOCS / "configuration.md"

# Where the project reads its environment: the settings, gunicorn's and Celery's
# configuration, the proxy in front of gunicorn (config/front_proxy.py), the start scripts
# (scripts/serve.py and scripts/manage.py read EMBEDDED_DB_PORT and DATA_DIR before the service
# starts; the container's scripts/start reads ROLE) and the package installer of the set-up and
# the image (scripts/install_requirements: TORCH_INDEX_URL); the malloc arena rule reads glibc's
# own variables, before Django's settings exist.
PYTHON_READERS = [
    "config/settings.py",
    "config/gunicorn.py",
    "imagegen/distributed/celery_app.py",
    "config/front_proxy.py",
    "scripts/serve.py",
    "scripts/manage.py",
    "imagegen/model/malloc_arena.py",
]
SHELL_READERS = ["scripts/start", "scripts/install_requirements", "scripts/test"]
ENV_HELPERS = {"env_str", "env_bool", "env_int", "env_float", "env_list"}
ENVIRON_METHODS = {"get", "setdefault"}  # setdefault keeps the operator's value: a read too


def literal(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def is_os_environ(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "environ"
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
    )


def environ_copies(tree: ast.AST) -> set[str]:
    """Names bound to a copy of the environment: `env = dict(os.environ)`, `os.environ.copy()`."""
    names = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Call):
            continue
        call = node.value
        copied = (
            isinstance(call.func, ast.Name)
            and call.func.id == "dict"
            and len(call.args) == 1
            and is_os_environ(call.args[0])
        ) or (
            isinstance(call.func, ast.Attribute)
            and call.func.attr == "copy"
            and is_os_environ(call.func.value)
        )
        if copied:
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def python_reads(source: str) -> set[str]:
    """Literal variable names read through the env_* helpers, os.environ (get, setdefault,
    [...]), os.getenv, or a copy of os.environ."""
    tree = ast.parse(source)
    copies = environ_copies(tree)

    def is_environ(node: ast.AST) -> bool:
        return is_os_environ(node) or (isinstance(node, ast.Name) and node.id in copies)

    def reads(func: ast.AST) -> bool:
        if isinstance(func, ast.Name):
            return func.id in ENV_HELPERS
        if not isinstance(func, ast.Attribute):
            return False
        if func.attr in ENVIRON_METHODS:
            return is_environ(func.value)
        return func.attr == "getenv" and isinstance(func.value, ast.Name) and func.value.id == "os"

    names = set()
    for node in ast.walk(tree):
        name = None
        if isinstance(node, ast.Call) and node.args and reads(node.func):
            name = literal(node.args[0])
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and is_environ(node.value)
        ):
            name = literal(node.slice)
        if name is not None:
            names.add(name)
    return names


def shell_reads(source: str) -> set[str]:
    code = "\n".join(line.split("#", 1)[0] for line in source.splitlines())
    return set(re.findall(r"\$\{?([A-Z][A-Z0-9_]*)", code))


def variables_read() -> set[str]:
    names = set()
    for path in PYTHON_READERS:
        names |= python_reads((ROOT / path).read_text())
    for path in SHELL_READERS:
        names |= shell_reads((ROOT / path).read_text())
    return names


def variables_documented(text: str) -> set[str]:
    """The backticked names in the first column of the page's tables."""
    names = set()
    for line in text.splitlines():
        cells = line.split("|")
        if not line.startswith("|") or len(cells) < 3 or set(cells[1].strip()) <= {"-", " "}:
            continue
        names.update(re.findall(r"`([A-Z][A-Z0-9_]*)`", cells[1]))
    return names


def test_the_readers_are_found():
    """The parser sees each way the project reads a variable (a guard for the test itself)."""
    read = variables_read()
    assert {"DEBUG", "MODEL_ID", "GEN_NICE", "JOB_BROKER_URL"} <= read  # env_* helpers
    assert {"BIND", "GUNICORN_GRACEFUL_TIMEOUT", "ACCESS_LOG"} <= read  # os.environ.get
    assert "HF_XET_HIGH_PERFORMANCE" in read  # os.environ.setdefault
    assert {"EMBEDDED_DB_PORT", "DATA_DIR"} <= read  # scripts/serve.py, a copy of os.environ
    assert "ROLE" in read  # scripts/start
    assert "TORCH_INDEX_URL" in read  # scripts/install_requirements
    sample = 'import os\nos.getenv("A")\nos.environ["B"]\ne = os.environ.copy()\ne.get("C")\n'
    assert python_reads(sample) == {"A", "B", "C"}


def test_every_variable_read_is_documented_and_every_documented_one_is_read():
    read = variables_read()
    documented = variables_documented(CONFIGURATION.read_text())
    assert not read - documented, f"read but not in docs/configuration.md: {read - documented}"
    assert not documented - read, f"in docs/configuration.md but never read: {documented - read}"


def test_a_missing_or_an_extra_row_is_caught():
    text = CONFIGURATION.read_text()
    without = "\n".join(line for line in text.splitlines() if not line.startswith("| `BIND` |"))
    assert variables_read() - variables_documented(without) == {"BIND"}
    extra = text + "\n| `NOT_A_SETTING` | none | nothing |\n"
    assert variables_documented(extra) - variables_read() == {"NOT_A_SETTING"}


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 250, f"README.md has {len(lines)} lines; move the details to docs/"


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def without_code(text: str) -> str:
    """The text outside fenced code blocks and inline code spans."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", prose)


def anchors(text: str) -> set[str]:
    """GitHub's anchors for the headings: lower case, punctuation dropped, spaces to hyphens,
    a repeated one numbered."""
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(
        r"^#{1,6} (.+?)\s*$", re.sub(r"^```.*?^```", "", text, flags=re.M | re.S), re.M
    ):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(path: Path) -> list[str]:
    targets = re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", without_code(path.read_text()))
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def test_every_relative_link_in_the_docs_reaches_a_file_and_a_heading():
    broken = []
    for source in markdown_files():
        for target in relative_links(source):
            file_part, _, anchor = target.partition("#")
            dest = (source.parent / file_part).resolve() if file_part else source
            if not dest.exists():
                broken.append(f"{source.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
                broken.append(f"{source.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_docs_link_every_page_from_readme():
    linked = {Path(t.partition("#")[0]).name for t in relative_links(ROOT / "README.md")}
    pages = {page.name for page in DOCS.glob("*.md")}
    assert pages <= linked, f"not linked from README.md: {pages - linked}"
