"""Real parts for the tests: a SecantusDB server, the app under gunicorn, a tiny diffusers
model served by a local hub."""

import gc
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

# Before huggingface_hub is imported (tiny_model imports it): in-process downloads must talk
# to the local hub only, never to the public hub's telemetry.
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"

from scripts.embedded_mongo import EmbeddedMongo
from tests.support.distributed import RedisServer
from tests.support.local_hub import LocalHub
from tests.support.model_service import (
    PULL_TIMEOUT,
    SD_INPAINT_REPO,
    SD_REPO,
    SDXL_REPO,
    model_service_env,
    pull_until_ready,
)
from tests.support.processes import AppServer, free_port
from tests.support.tiny_model import build_tiny_pipeline
from tests.support.xdist_schedule import (
    PACKAGE_GROUPS,
    GroupSeconds,
    check_stack_user,
    group_of_test,
)

__all__ = ["PACKAGE_GROUPS"]


def pytest_configure(config: pytest.Config) -> None:
    from tests.support.end_to_end import EndToEndCount

    config.pluginmanager.register(EndToEndCount(config), "end_to_end")
    if config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(GroupSeconds(), "group_seconds")


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported (torch, diffusers, transformers, every test module: millions of
    objects) lives as long as the process: frozen out of the collector's sight, so each full
    collection (the job board's after a failed or cancelled job, and Python's own) walks only
    what the tests made, not all of it (0.5 s each, 114 CPU s of a run of the suite, before)."""
    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """./scripts/test runs pytest-xdist workers (--dist loadgroup): each module, or each
    package of PACKAGE_GROUPS, runs on one worker, so its module- or package-scoped fixtures
    (an app under gunicorn, a pulled model) start once, not once per worker; its tests on the
    session's distributed stack run on the stack's worker. The scheduler
    (tests/support/xdist_schedule.py) groups by the same rule; the marker says it."""
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group_of_test(item.nodeid)))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test that asks for the shared stack by name runs on its worker (check_stack_user);
    the fixtures that start it only in distributed mode check through stack_of."""
    if "shared_stack" in getattr(item, "fixturenames", ()):
        check_stack_user(item.nodeid)


@pytest.fixture(scope="session")
def work_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("work")


@pytest.fixture(scope="session")
def mongo(work_dir: Path) -> Iterator[EmbeddedMongo]:
    with EmbeddedMongo(work_dir / "mongo", port=free_port()) as server:
        yield server


@pytest.fixture(scope="session")
def app(mongo: EmbeddedMongo, work_dir: Path) -> Iterator[AppServer]:
    env = {"MONGODB_URI": mongo.uri(), "DATA_DIR": str(work_dir / "data")}
    with AppServer(env, work_dir / "app.log") as server:
        yield server


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server of each module's own (its keys are the module's alone)."""
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture
def http() -> Iterator[requests.Session]:
    with requests.Session() as session:
        yield session


@pytest.fixture(scope="session")
def hub_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hub")
    build_tiny_pipeline(root / SD_REPO, layout="sd")
    build_tiny_pipeline(root / SDXL_REPO, layout="sdxl")
    build_tiny_pipeline(root / SD_INPAINT_REPO, layout="sd-inpaint", seed=1)
    return root


@pytest.fixture
def hub(hub_root: Path) -> Iterator[LocalHub]:
    with LocalHub(hub_root) as server:
        yield server


@pytest.fixture
def share(tmp_path: Path) -> Path:
    """The mounted share of one test (MODEL_DIR)."""
    path = tmp_path / "share"
    path.mkdir()
    return path


@pytest.fixture
def model_env(tmp_path: Path, hub: LocalHub, share: Path) -> dict[str, str]:
    """The image service's settings for this test's hub and share."""
    return model_service_env(hub.url, share, tmp_path)


@pytest.fixture
def start_app(tmp_path: Path, model_env: dict[str, str]) -> Iterator[Callable[..., AppServer]]:
    """Starts app processes on this test's share; each gets a fresh local download cache,
    as a new container revision would."""
    started: list[AppServer] = []

    def start(**env: str) -> AppServer:
        n = len(started)
        cache = {"DOWNLOAD_CACHE_DIR": str(tmp_path / f"cache-{n}")}
        app = AppServer({**model_env, **cache, **env}, tmp_path / f"app-{n}.log").start()
        started.append(app)
        return app

    yield start
    for app in started:
        app.stop()


@pytest.fixture(scope="session")
def shared_stack(hub_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """Distributed mode for the modules that run their routes in both modes: one Redis, one
    worker and the tiny SD model pulled onto one share, started once; each module adds a web
    replica of its own settings (tests/support/model_service.py `ready_in_mode`). Who asks
    for it is checked where they ask (pytest_runtest_setup, stack_of)."""
    from tests.support.distributed import Stack

    work = tmp_path_factory.mktemp("shared-stack")
    with (
        LocalHub(hub_root) as hub,
        Stack(model_service_env(hub.url, work / "share", work), work) as stack,
    ):
        stack.start(replicas=1, workers=1)
        pull_until_ready(stack.apps[0], timeout=PULL_TIMEOUT["distributed"])
        stack.apps[0].stop()  # it pulled; the modules bring their own
        yield stack
