"""Session-wide real parts: a SecantusDB server and the app under gunicorn talking to it."""

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from scripts.embedded_mongo import EmbeddedMongo
from tests.support.processes import AppServer, free_port


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


@pytest.fixture
def http() -> Iterator[requests.Session]:
    with requests.Session() as session:
        yield session
