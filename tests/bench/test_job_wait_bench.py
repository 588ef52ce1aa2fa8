"""bench/job_wait_bench.py measures what it says, briefly, on a real redis-server: with the
change feed, waiting requests cost a fraction of the commands of the 50 ms poll and learn of
their job's end at its announcement, well before the fallback's read a second; without the
store's announcements the answers would come at that read."""

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.job_wait_bench import run_mode
from tests.support.distributed import RedisServer

ARGS = argparse.Namespace(clients=4, seconds=3.0, warmup=1.0, steps=4, step_seconds=0.2)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis") as running:
        yield running


def test_the_change_feed_costs_a_fraction_of_the_polls_commands_and_answers_sooner(server):
    poll, notify = run_mode("poll", server, ARGS), run_mode("notify", server, ARGS)
    assert poll.jobs_finished >= 2 and notify.jobs_finished >= 2  # the worker ran jobs
    assert poll.job_reads_per_second >= 4 * 15  # four clients, a read every 50 ms each
    assert notify.job_reads_per_second < poll.job_reads_per_second / 4
    assert notify.commands_per_second < poll.commands_per_second / 2
    assert notify.answer_p50_ms < 200  # at the announcement, not at the fallback's read
