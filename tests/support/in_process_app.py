"""A ready app of this process for a test module (or package) that shares one across its
tests: the tiny SD model on a share of its own, the backend the app's composition root
(imagegen.backend.build_backend) builds for a web process of the in-process mode with these
settings, installed, and the app served on a loopback port. It answers `url` and `base_url` as
an AppServer does, so the real clients (the openai SDK, webuiapi, the MCP client, requests)
talk HTTP to it, and no gunicorn is started."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.test import override_settings

from imagegen.backend import build_backend, installed
from tests.support.in_process import LoopbackApp, loopback, settings_for
from tests.support.loaders import wait_for
from tests.support.local_hub import LocalHub
from tests.support.model_service import model_service_env


@contextmanager
def in_process_app(
    hub_root: Path, work: Path, *, pulled: bool = True, **overrides: Any
) -> Iterator[LoopbackApp]:
    """The app of `overrides` (Django settings, parsed values: True, 500, a Path...) over the
    settings a process started with model_service_env for a hub of `hub_root` has, on the tiny
    SD model, pulled and loaded unless `pulled` is False (then the hub stays up for the app's
    own pull). Settings and backend are this process's until the block ends, so one such app
    runs at a time."""
    share, images = work / "share", work / "images"
    share.mkdir()
    with LocalHub(hub_root) as hub:
        env = model_service_env(hub.url, share, work)
        del env["MONGODB_URI"]  # the todo and key stores stay on the session's database
        with override_settings(**settings_for(env)), override_settings(**overrides):
            built = build_backend()
            if pulled:
                assert built.loader.pull()
                assert wait_for(built.loader, {"ready", "failed"}) == "ready", built.loader.status()
            try:
                with installed(built), loopback() as base_url:
                    yield LoopbackApp(
                        base_url, built, env={"OUTPUT_DIR": str(images), "MODEL_DIR": str(share)}
                    )
            finally:  # nothing of the module's goes on running under the next one's tests
                for job in built.jobs.unfinished():
                    built.jobs.cancel(job.id)
