"""./scripts/test's two xdist workers take whole groups (--dist loadgroup): each module is one
group, and each package whose tests share package-scoped apps is one, so no module or package
fixture starts on both workers (tests/conftest.py)."""

import pytest

from tests.conftest import PACKAGE_GROUPS
from tests.support.processes import ROOT, AppServer


def group_of(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("xdist_group")
    return marker.args[0] if marker else None


def test_every_collected_test_is_in_its_modules_group_or_its_shared_packages(request):
    items = request.session.items
    assert items
    for item in items:
        module = item.path.relative_to(ROOT).as_posix()
        shared = [p for p in PACKAGE_GROUPS if module.startswith(p + "/")]
        assert group_of(item) == (shared[0] if shared else module), item.nodeid


def test_the_suites_generations_run_on_one_thread_at_the_tests_own_priority(tmp_path, settings):
    # On two cores shared with the other worker, two torch threads or GEN_NICE's default (10)
    # made a tiny job miss a test's 8 s synchronous timeout (seen in CI). tests/settings.py
    # sets both for this process and the apps it starts; a test's own env still wins.
    import torch

    assert (settings.TORCH_THREADS, settings.GEN_NICE, torch.get_num_threads()) == ("1", 0, 1)
    env = AppServer({"GEN_NICE": "7"}, tmp_path / "app.log").env
    assert (env["TORCH_THREADS"], env["GEN_NICE"]) == ("1", "7")
