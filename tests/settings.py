"""Settings for in-process Django under pytest: the real settings, with a test key and hosts."""

import os

os.environ.setdefault("SECRET_KEY", "test-secret")
os.environ.setdefault("ALLOWED_HOSTS", "testserver,127.0.0.1,localhost")

from config.settings import *  # noqa: F403
