"""./scripts/test's two xdist workers take whole groups (--dist loadgroup): each module is one
group, and each package whose tests share package-scoped apps is one, so no module or package
fixture starts on both workers (tests/conftest.py)."""

import pytest

from tests.conftest import PACKAGE_GROUPS
from tests.support.processes import ROOT


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
