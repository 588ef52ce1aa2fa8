"""./scripts/test's xdist workers take whole groups (--dist loadgroup): each module is one
group, and each package whose tests share package-scoped apps is one, so no module or package
fixture starts on two workers (tests/conftest.py); the tests that run on the session's
distributed stack are one group, so one worker starts it."""

import gc
import re
from types import SimpleNamespace

import pytest

from tests.conftest import PACKAGE_GROUPS, pytest_runtest_setup
from tests.support.processes import ROOT, AppServer
from tests.support.xdist_schedule import (
    SHARED_STACK_GROUP,
    check_stack_user,
    group_of_test,
    stack_of,
    uses_shared_stack,
)


def group_of(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("xdist_group")
    return marker.args[0] if marker else None


def test_every_collected_test_is_in_its_modules_group_or_its_shared_packages(request):
    items = request.session.items
    assert items
    for item in items:
        module = item.path.relative_to(ROOT).as_posix()
        shared = [p for p in PACKAGE_GROUPS if module.startswith(p + "/")]
        own = shared[0] if shared else module
        callspec = getattr(item, "callspec", None)
        modes = callspec.params.values() if callspec else ()
        distributed = "distributed" in modes or "distributed" in item.originalname.split("_")
        expected = SHARED_STACK_GROUP if uses_shared_stack(own) and distributed else own
        assert group_of(item) == expected, item.nodeid
        # The scheduler's reading of the test's id (pytest-xdist's own reading of the marker
        # no longer groups anything under pytest 9: it saw each test as a group of its own).
        assert group_of_test(item.nodeid) == group_of(item), item.nodeid


def test_the_tests_on_the_shared_stack_run_as_one_and_the_others_apart():
    """Each worker that runs a test on the stack starts one (a Redis, a worker, a pull): one
    group puts them all on one worker. The same modules' in-process tests keep their own group,
    so they run beside the stack on another worker; a module that never names it keeps its own."""
    on_stack = {
        "tests/imagegen/api/test_generate.py::test_x[distributed]": (
            "tests/imagegen/api/test_generate.py"
        ),
        "tests/imagegen/ui/test_page_preview.py::test_x[distributed]": "tests/imagegen/ui",
        "tests/imagegen/api/clients/test_openai_sdk.py::test_x[4-distributed]": (
            "tests/imagegen/api/clients"
        ),
        "tests/apikeys/test_key_scopes.py::test_in_distributed_mode_x": (
            "tests/apikeys/test_key_scopes.py"
        ),
    }
    for nodeid, own in on_stack.items():
        assert group_of_test(nodeid) == SHARED_STACK_GROUP, nodeid
        in_process = nodeid.replace("distributed", "in-process")
        assert group_of_test(in_process) == own, in_process
    assert group_of_test("tests/imagegen/api/test_generate.py::test_undistributed_x") == (
        "tests/imagegen/api/test_generate.py"
    )
    alone = "tests/todos/test_round_trips.py"
    assert group_of_test(f"{alone}::test_x[distributed]") == alone


def test_a_test_that_starts_the_stack_apart_from_its_group_is_stopped_naming_the_rule():
    check_stack_user("tests/imagegen/api/test_generate.py::test_x[distributed]")
    with pytest.raises(pytest.UsageError, match='do not say "distributed"'):
        check_stack_user("tests/imagegen/api/test_generate.py::test_x[in-process]")


def test_both_ways_to_the_stack_check_the_test_that_asks_before_it_starts():
    """By name (the fixture in the test's closure: conftest's setup hook) and through stack_of
    (a fixture that starts it only in distributed mode)."""
    apart = "tests/imagegen/api/test_generate.py::test_x[in-process]"
    on_stack = "tests/imagegen/api/test_generate.py::test_x[distributed]"
    pytest_runtest_setup(SimpleNamespace(nodeid=on_stack, fixturenames=["shared_stack"]))
    pytest_runtest_setup(SimpleNamespace(nodeid=apart, fixturenames=["app"]))
    with pytest.raises(pytest.UsageError, match=re.escape(apart)):
        pytest_runtest_setup(SimpleNamespace(nodeid=apart, fixturenames=["shared_stack"]))
    asked: list[str] = []
    request = SimpleNamespace(getfixturevalue=asked.append)
    request._pyfuncitem = SimpleNamespace(nodeid=on_stack)
    stack_of(request)
    request._pyfuncitem = SimpleNamespace(nodeid=apart)
    with pytest.raises(pytest.UsageError, match=re.escape(apart)):
        stack_of(request)
    assert asked == ["shared_stack"]  # not started for the test run apart


def test_what_collection_imported_is_frozen_out_of_the_collectors_sight():
    """tests/conftest.py freezes it after collection, so each full collection (the job board's
    after a failed or cancelled job, Python's own) walks only what the tests made since."""
    assert gc.get_freeze_count() > 200_000


def test_the_suites_generations_run_on_one_thread_at_the_tests_own_priority(tmp_path, settings):
    # On two cores shared with the other worker, two torch threads or GEN_NICE's default (10)
    # made a tiny job miss a test's 8 s synchronous timeout (seen in CI). tests/settings.py
    # sets both for this process and the apps it starts; a test's own env still wins.
    import torch

    assert (settings.TORCH_THREADS, settings.GEN_NICE, torch.get_num_threads()) == ("1", 0, 1)
    env = AppServer({"GEN_NICE": "7"}, tmp_path / "app.log").env
    assert (env["TORCH_THREADS"], env["GEN_NICE"]) == ("1", "7")


class StubConfig:
    """What the scheduler reads of pytest's config: two workers, no cache of earlier runs."""

    cache = None

    class option:
        loadscopereorder = True

    def getvalue(self, name: str):
        return {"tx": ["2*popen"], "dist": "loadgroup"}[name]


class StubWorker:
    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.given: list[list[int]] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.given.append(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def test_the_longest_group_goes_first_and_a_worker_holds_one_group_ahead(monkeypatch):
    from tests.support import xdist_schedule

    seconds = {"long.py": 40.0, "mid.py": 20.0, "many.py": 5.0, "short.py": 1.0}  # unknown: 4 tests
    monkeypatch.setattr(xdist_schedule, "known_seconds", lambda config: seconds)
    tests = {"many": 6, "unknown": 4, "short": 1, "mid": 1, "long": 1}
    collection = [f"{g}.py::t{i}" for g, n in tests.items() for i in range(n)]
    scheduler = xdist_schedule.LongestGroupFirst(StubConfig())
    one, two = StubWorker("gw0"), StubWorker("gw1")
    for worker in (one, two):
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, collection)
    scheduler.schedule()

    def groups(worker: StubWorker) -> list[str]:
        return [collection[indices[0]].split(".py")[0] for indices in worker.given]

    # Each one-test group's worker needs a next test to run it: it gets the next longest.
    assert (groups(one), groups(two)) == (["long", "many"], ["mid", "unknown"])
    # Nothing more while it has two tests or more to run ("long" and 2 of "many" left) ...
    for index in one.given[1][:4]:
        scheduler.mark_test_complete(one, index, 1.0)
    scheduler.mark_test_complete(one, one.given[0][0], 40.0)
    assert groups(one) == ["long", "many"]
    # ... then the next group once its last test is all it has.
    scheduler.mark_test_complete(one, one.given[1][4], 1.0)
    assert groups(one) == ["long", "many", "short"]
    scheduler.mark_test_complete(one, one.given[1][5], 1.0)
    assert one.shutting_down  # nothing waits: it runs its last test and stops
    assert scheduler.measured == {"long.py": 40.0, "many.py": 6.0}


def test_a_group_seen_nowhere_is_judged_by_its_test_count():
    from tests.support.xdist_schedule import longest, wants_more

    waiting = {"a": {"x": False}, "b": {"y": False, "z": False}, "c": {"w": False}}
    assert longest(waiting, {"a": 0.8}) == "b"  # 2 tests at 0.5 s each
    assert longest(waiting, {"a": 1.5}) == "a"
    assert [wants_more(n) for n in (0, 1, 2, 3)] == [True, True, False, False]


def test_only_a_run_of_the_whole_suite_keeps_its_groups_seconds():
    from tests.support.xdist_schedule import whole_suite

    def run(source: pytest.Config.ArgsSource, keyword: str = "", markexpr: str = "") -> bool:
        option = SimpleNamespace(keyword=keyword, markexpr=markexpr)
        return whole_suite(SimpleNamespace(args_source=source, option=option))

    assert run(pytest.Config.ArgsSource.TESTPATHS)
    assert not run(pytest.Config.ArgsSource.ARGS)  # paths given
    assert not run(pytest.Config.ArgsSource.TESTPATHS, keyword="pull")
    assert not run(pytest.Config.ArgsSource.TESTPATHS, markexpr="slow")
