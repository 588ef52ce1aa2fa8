"""pytest-xdist's loadgroup scheduling, longest group first, each worker holding one group ahead.

xdist's own order is by test count, so its last groups are the one-test modules that start
processes (the bench smoke runs, the database faults: 20-40 s each), and a worker takes a new
group while three of its tests are still to run, so at the end one worker can hold two long
groups while the other has nothing left. Here the next group is the longest still waiting, by
the seconds it took in the last run here (pytest's cache) or in group_seconds.json beside this
file (a fresh clone), and a worker is given one only when its last test is all it has left (it
waits for the next before running it: pytest needs the next test to tear fixtures down)."""

import functools
import json
import re
from pathlib import Path

import pytest
from xdist.scheduler import LoadGroupScheduling
from xdist.workermanage import WorkerController

# Packages whose tests share package-scoped fixtures (an app pulled once for the package).
PACKAGE_GROUPS = ("tests/imagegen/api/clients", "tests/imagegen/ui")

# The tests that run on the session's distributed stack (tests/conftest.py `shared_stack`: a
# Redis, a worker that imports torch and a pulled model, about 20 s to start) are one group, so
# one worker starts it, not each. A module or package uses it where its source names one of
# SHARED_STACK_WORDS; of its tests, those whose name or parameters say "distributed" run on it
# (the mode parameter's id), and the rest stay in their own group, beside it on another worker.
SHARED_STACK_GROUP = "the shared distributed stack"
SHARED_STACK_WORDS = re.compile(
    r"\bshared_stack\b|\bstack_of\(|\bready_in_mode\(|\bready_in_either_mode\("
)
DISTRIBUTED_WORD = re.compile(r"(?:^|[_\[\-])distributed(?:$|[_\]\-])")
ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def uses_shared_stack(group: str) -> bool:
    path = ROOT / group
    files = sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.is_file() else []
    return any(SHARED_STACK_WORDS.search(file.read_text(encoding="utf-8")) for file in files)


def own_group(module: str) -> str:
    """A test module's group apart from the stack: its package's where that is one of
    PACKAGE_GROUPS, else its own."""
    return next((p for p in PACKAGE_GROUPS if module.startswith(p + "/")), module)


def group_of_test(nodeid: str) -> str:
    """The group the scheduler gives a test, from its id. xdist's own reading of the marker
    renames the test, which pytest 9 no longer lets it do: each test would be a group."""
    module, _, name = nodeid.partition("::")
    group = own_group(module)
    if uses_shared_stack(group) and DISTRIBUTED_WORD.search(name):
        return SHARED_STACK_GROUP
    return group


def check_stack_user(nodeid: str) -> None:
    """A test that starts the shared stack where the scheduler did not send it would start a
    second stack on another worker: its name or parameters must say "distributed"."""
    if group_of_test(nodeid) != SHARED_STACK_GROUP:
        raise pytest.UsageError(
            f"{nodeid} uses the shared distributed stack, but its name and parameters do not "
            'say "distributed", so the scheduler runs it apart from the stack '
            "(tests/support/xdist_schedule.py)"
        )


def stack_of(request: pytest.FixtureRequest):
    """The session's shared stack for a fixture that starts it only in distributed mode,
    checked against the test that asked (check_stack_user) each time, not only at its start."""
    check_stack_user(request._pyfuncitem.nodeid)
    return request.getfixturevalue("shared_stack")


SECONDS_FILE = Path(__file__).with_name("group_seconds.json")
CACHE_KEY = "imagegen/group-seconds"
# A group seen in neither place: about what most tests here take.
SECONDS_PER_UNKNOWN_TEST = 0.5


def known_seconds(config: pytest.Config) -> dict[str, float]:
    """Each group's seconds: tests/support/group_seconds.json, updated by the last runs here."""
    seconds = json.loads(SECONDS_FILE.read_text()) if SECONDS_FILE.exists() else {}
    if getattr(config, "cache", None) is not None:
        seconds.update(config.cache.get(CACHE_KEY, {}))
    return seconds


def longest(waiting: dict[str, dict[str, bool]], seconds: dict[str, float]) -> str:
    """The waiting group expected to take longest (its test count where it is unknown)."""
    return max(waiting, key=lambda g: seconds.get(g, SECONDS_PER_UNKNOWN_TEST * len(waiting[g])))


def wants_more(pending: int) -> bool:
    """Whether a worker with `pending` tests not yet done is given the next group: only when
    the one it holds back for want of a next test is all that is left."""
    return pending <= 1


class LongestGroupFirst(LoadGroupScheduling):
    def __init__(self, config: pytest.Config, log=None) -> None:
        super().__init__(config, log)
        self.seconds = known_seconds(config)
        self.measured: dict[str, float] = {}

    def _split_scope(self, nodeid: str) -> str:
        return group_of_test(nodeid)

    def _assign_work_unit(self, node: WorkerController) -> None:
        self.workqueue.move_to_end(longest(self.workqueue, self.seconds), last=False)
        super()._assign_work_unit(node)

    def _reschedule(self, node: WorkerController) -> None:
        if node.shutting_down:
            return
        if not self.workqueue:
            node.shutdown()
            return
        if wants_more(self._pending_of(self.assigned_work[node])):
            self._assign_work_unit(node)

    def mark_test_complete(self, node: WorkerController, item_index: int, duration: float = 0):
        group = self._split_scope(self.registered_collections[node][item_index])
        self.measured[group] = self.measured.get(group, 0.0) + duration
        super().mark_test_complete(node, item_index, duration)


def whole_suite(config: pytest.Config) -> bool:
    """Whether this run took every test (no path, -k or -m given): only such a run's seconds are
    kept, a part of a group's tests would make it look short."""
    return (
        config.args_source == pytest.Config.ArgsSource.TESTPATHS
        and not config.option.keyword
        and not config.option.markexpr
    )


class GroupSeconds:
    """The controller's plugin: the scheduler for --dist loadgroup, and each group's measured
    seconds in a run of the whole suite kept in pytest's cache for the next run."""

    def __init__(self) -> None:
        self.scheduler: LongestGroupFirst | None = None

    def pytest_xdist_make_scheduler(self, config: pytest.Config, log) -> LongestGroupFirst | None:
        if config.getvalue("dist") != "loadgroup":
            return None
        self.scheduler = LongestGroupFirst(config, log)
        return self.scheduler

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.scheduler is None or getattr(session.config, "cache", None) is None:
            return
        if not whole_suite(session.config):
            return
        kept = session.config.cache.get(CACHE_KEY, {})
        kept.update({g: round(s, 1) for g, s in self.scheduler.measured.items()})
        session.config.cache.set(CACHE_KEY, kept)
