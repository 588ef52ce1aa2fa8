"""torch's threads follow the container's CPU quota, not the host's CPU count."""

import os

import pytest

from imagegen.model.cpu import cgroup_quota, cpu_budget, torch_threads


@pytest.fixture
def cgroup_v2(tmp_path):
    def write(cpu_max: str):
        (tmp_path / "cpu.max").write_text(cpu_max + "\n")
        return tmp_path

    return write


def test_a_quota_of_four_cpus_gives_four_threads_on_a_big_host(cgroup_v2, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(64)))
    root = cgroup_v2("400000 100000")
    assert cgroup_quota(root) == 4.0
    assert cpu_budget(root) == 4
    assert torch_threads("auto", root) == 4
    assert torch_threads("3", root) == 3


def test_fractional_quotas_round_up_and_never_exceed_the_cpus_present(cgroup_v2, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    assert cpu_budget(cgroup_v2("150000 100000")) == 2
    assert cpu_budget(cgroup_v2("800000 100000")) == 2
    assert cpu_budget(cgroup_v2("50000 100000")) == 1


def test_no_quota_means_the_cpus_this_process_may_run_on(cgroup_v2, tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2})
    assert cpu_budget(cgroup_v2("max 100000")) == 3
    assert cpu_budget(tmp_path / "absent") == 3


def test_cgroup_v1_quota(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(16)))
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("200000")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000")
    assert cpu_budget(tmp_path) == 2
