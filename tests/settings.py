"""Settings for in-process Django under pytest: the real settings, with a test key and hosts."""

import os

os.environ.setdefault("SECRET_KEY", "test-secret")
os.environ.setdefault("ALLOWED_HOSTS", "testserver,127.0.0.1,localhost")
# The suite's generations (in this process and in the apps it starts, which inherit these)
# run on one torch thread at the tests' own priority unless a test says otherwise: on two
# cores shared with the other xdist worker, two intra-op threads wait on each other for a core
# (a 2-step tiny job 10x+ slower), and under GEN_NICE's default a tiny job waits behind the
# other worker's tests. Both gave 504s in CI to tests that allow a synchronous request 8 s.
# What the two settings do: tests/imagegen/test_cpu_budget.py, test_generation_priority.py.
os.environ.setdefault("TORCH_THREADS", "1")
os.environ.setdefault("GEN_NICE", "0")

from config.settings import *  # noqa: F403
