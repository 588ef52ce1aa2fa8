"""Counts the end-to-end tests of each job mode, printed at the end of a run (README's figure):
a test is end to end when it is handed a process of the service (an AppServer, a Stack) or
starts one while it runs; its mode is distributed when that process has JOB_BROKER_URL.
Everything else runs in this process. Under pytest-xdist each worker counts its own tests
and the controller adds them up."""

from collections import Counter

import pytest

from tests.support import processes
from tests.support.distributed import Stack
from tests.support.processes import AppServer, job_mode


def _modes_of(value: object) -> set[str]:
    if isinstance(value, Stack):
        return {"distributed"}
    if isinstance(value, AppServer):
        return {job_mode(value.env)}
    if isinstance(value, list | tuple):  # a fixture handing several (apps of both modes)
        return set().union(*(_modes_of(part) for part in value))
    return set()


def _modes_handed(item: pytest.Item) -> set[str]:
    return set().union(*(_modes_of(value) for value in getattr(item, "funcargs", {}).values()))


class EndToEndCount:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.counts: Counter[str] = Counter()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item):
        processes.launched_modes.clear()  # what its fixtures start counts for it too
        yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        yield
        for mode in _modes_handed(item) | processes.launched_modes:
            self.counts[mode] += 1

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        output = getattr(self.config, "workeroutput", None)
        if output is not None:  # an xdist worker: the controller adds it up
            output["end_to_end"] = dict(self.counts)

    def pytest_testnodedown(self, node, error) -> None:
        self.counts.update(getattr(node, "workeroutput", {}).get("end_to_end", {}))

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if getattr(self.config, "workeroutput", None) is None:
            shown = ", ".join(f"{m} {self.counts[m]}" for m in ("in-process", "distributed"))
            terminalreporter.write_line(f"end-to-end tests (a process of the service): {shown}")
