"""Settings for in-process Django under pytest: the real settings, with a test key and hosts."""

import os

os.environ.setdefault("SECRET_KEY", "test-secret")
os.environ.setdefault("ALLOWED_HOSTS", "testserver,127.0.0.1,localhost")
# The suite's torch work (in this process and in the apps it starts, which inherit these) runs
# on one thread, and its generations at the tests' own priority, unless a test says otherwise:
# on two cores shared with the other xdist worker, two intra-op threads wait on each other for
# a core (a 2-step tiny job 10x+ slower, a stretch of a tiny UNet call past 0.3 s), and under
# GEN_NICE's default a tiny job waits behind the other worker's tests. Both gave failures in
# CI to tests that allow a synchronous request 8 s. OMP_NUM_THREADS: torch's threads in this
# process, read when torch starts (after this: pytest-django loads these settings first).
# What the settings do: tests/imagegen/model/test_cpu_budget.py, test_generation_priority.py.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TORCH_THREADS", "1")
os.environ.setdefault("GEN_NICE", "0")

from config.settings import *  # noqa: F403
