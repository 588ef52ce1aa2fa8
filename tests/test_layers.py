"""The import graph of config/, imagegen/ and todos/ is a tree of layers: api -> services and
selectors -> backend -> distributed -> generation -> model. A lower module that reaches up
(the model's loader asking for the distributed model, as it once did) makes a circle, and
every change to either side then drags the other along. Read from the source with ast, every
import counted, the ones inside functions too."""

import ast
import os
import subprocess
import sys
from pathlib import Path

from tests.support.processes import ROOT

PACKAGES = ("apikeys", "config", "imagegen", "todos")

# Lower number = lower layer. A module may import its own layer or a lower one.
LAYERS = {
    "imagegen.model": 0,
    "imagegen.generation": 1,
    "imagegen.webhooks": 1,
    "imagegen.distributed": 2,
    "imagegen.backend": 3,
    "imagegen.services": 4,
    "imagegen.selectors": 4,
    "imagegen.api": 5,
    "imagegen.ui": 5,
}


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


def imports_of(path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules this file imports (`from a import b` counts a.b when b is a
    module of its own, else a)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    found.discard(module_name(path))
    return found


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    graph = {name: imports_of(path, modules) for name, path in modules.items()}
    for name in graph:  # a package's __init__ is not an edge of its own modules
        graph[name] = {other for other in graph[name] if not name.startswith(other + ".")}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def layer(module: str) -> int | None:
    for prefix, number in LAYERS.items():
        if module == prefix or module.startswith(prefix + "."):
            return number
    return None


def test_no_import_circle_anywhere():
    assert circles(import_graph()) == []


def test_no_module_imports_a_layer_above_its_own():
    upward = []
    for module, imported in import_graph().items():
        mine = layer(module)
        for other in imported:
            theirs = layer(other)
            if mine is not None and theirs is not None and theirs > mine:
                upward.append(f"{module} -> {other}")
    assert upward == []


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
        "config.celery",
        "config.settings",
        "config.wsgi",
        "imagegen.backend",
        "imagegen.distributed.connection",
        "imagegen.management.commands.run_worker",
    ]


def test_the_circle_finder_finds_a_circle():
    """The check above can fail: a graph with a circle is reported."""
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


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
    command = 'exec python -m pytest -n "${TEST_WORKERS:-2}" --dist loadgroup --durations=25 "$@"'
    assert command in script
