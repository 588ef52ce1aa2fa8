from collections.abc import Callable, Iterator

import pytest
import requests

from tests.support.processes import AppServer


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
