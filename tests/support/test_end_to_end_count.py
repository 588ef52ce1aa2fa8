"""The end-to-end count printed at the end of a run (README's figure) counts what it says: a
test handed a process of the service, or starting one, in that process's job mode."""

import contextlib
from pathlib import Path
from types import SimpleNamespace

from tests.support import processes
from tests.support.end_to_end import EndToEndCount
from tests.support.processes import AppServer


def run(
    counter: EndToEndCount,
    item: SimpleNamespace,
    starts: list[AppServer],
    fixture_starts: tuple[AppServer, ...] = (),
) -> None:
    setup = counter.pytest_runtest_setup(item)  # type: ignore[arg-type]
    next(setup)
    for server in fixture_starts:  # an app its fixtures start, not handed to the test
        processes.launched_modes.add(processes.job_mode(server.env))
    with contextlib.suppress(StopIteration):
        next(setup)
    call = counter.pytest_runtest_call(item)  # type: ignore[arg-type]
    next(call)
    for server in starts:  # what AppServer.launch records, without starting gunicorn
        processes.launched_modes.add(processes.job_mode(server.env))
    with contextlib.suppress(StopIteration):
        next(call)


def test_each_test_counts_once_in_each_mode_it_reached(tmp_path: Path) -> None:
    counter = EndToEndCount(SimpleNamespace())  # type: ignore[arg-type]
    replica = AppServer({"JOB_BROKER_URL": "redis://127.0.0.1:1/0"}, tmp_path / "a.log")
    alone = AppServer({}, tmp_path / "b.log")
    run(counter, SimpleNamespace(funcargs={"app": replica, "n": 3}), [])
    run(counter, SimpleNamespace(funcargs={}), [alone, alone])
    run(counter, SimpleNamespace(funcargs={"x": "not a process"}), [])
    run(counter, SimpleNamespace(funcargs={"app": alone}), [replica])
    run(counter, SimpleNamespace(funcargs={"apps": (alone, [replica])}), [])
    run(counter, SimpleNamespace(funcargs={}), [], fixture_starts=(replica,))
    assert dict(counter.counts) == {"distributed": 4, "in-process": 3}
