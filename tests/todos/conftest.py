from collections.abc import Callable, Iterator

import mongoengine
import pytest
import requests

from tests.support.processes import AppServer
from todos import indexes, transactions
from todos.connection import connect_database


@pytest.fixture(autouse=True)
def empty_todos(app: AppServer) -> Iterator[None]:
    requests.delete(app.url("/todos"), timeout=10).raise_for_status()
    yield


@pytest.fixture
def create(app: AppServer, http: requests.Session) -> Callable[..., dict]:
    """Creates a todo through the API and returns its data."""

    def _create(title: str, description: str | None = None) -> dict:
        todo = (
            {"title": title}
            if description is None
            else {"title": title, "description": description}
        )
        response = http.post(app.url("/todo"), json={"todo": todo}, timeout=10)
        assert response.status_code == 201, response.text
        return response.json()["data"]

    return _create


@pytest.fixture
def connect_here(settings, monkeypatch) -> Iterator[Callable[[str], None]]:
    """Connects this test process's MongoEngine to a database, as the app does when it starts,
    with the todo modules' once-per-process facts (indexes made, transactions supported)
    forgotten first; disconnects at the end. For in-process tests of services and routes."""

    def connect(uri: str) -> None:
        settings.MONGODB_URI = uri
        mongoengine.disconnect()
        connect_database()

    monkeypatch.setattr(indexes, "_ensured", False)
    monkeypatch.setattr(transactions, "_supported", None)
    yield connect
    mongoengine.disconnect()
