"""Each todo operation is one command to the database; the indexes are made once per process,
and made again by the next write when the first try found the database down."""

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from pymongo import monitoring
from pymongo.errors import ConnectionFailure

from scripts.embedded_mongo import EmbeddedMongo
from tests.support.processes import free_port
from todos import selectors, services
from todos.documents import todos_collection

INDEXES = {"_id_", "title_1", "createdAt_1__id_1", "pendingExpiresAt_1", "idempotencyKey_1"}


class CommandLog(monitoring.CommandListener):
    """The names of the commands this process sends while `recording` is on."""

    def __init__(self) -> None:
        self.names: list[str] | None = None

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.names is not None:
            self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    @contextmanager
    def recording(self) -> Iterator[list[str]]:
        self.names = names = []
        try:
            yield names
        finally:
            self.names = None


# pymongo takes listeners for every client made after this; they can't be removed, so this one
# records only inside `recording()`.
COMMANDS = CommandLog()
monitoring.register(COMMANDS)


def sent(call: Callable[[], object]) -> list[str]:
    with COMMANDS.recording() as names:
        call()
    return names


@pytest.fixture(scope="module")
def standalone(tmp_path_factory) -> Iterator[EmbeddedMongo]:
    work = tmp_path_factory.mktemp("standalone")
    with EmbeddedMongo(work / "mongo", port=free_port(), standalone=True) as server:
        yield server


@pytest.fixture(params=["replica set", "standalone"])
def database(request, mongo, standalone, connect_here) -> Iterator[EmbeddedMongo]:
    """A fresh database on the session's server (a replica set) or on a standalone one."""
    server = standalone if request.param == "standalone" else mongo
    name = f"round_trips_{uuid.uuid4().hex[:8]}"
    connect_here(server.uri(name))
    yield server
    todos_collection().database.client.drop_database(name)


def test_one_command_per_operation_and_the_indexes_once(database):
    first = sent(lambda: services.todo_create(title="first", description=None))
    assert first == ["createIndexes"] * 4 + ["insert"]

    todo, _replayed = services.todo_create(title="second", description=None)
    todo_id = str(todo["_id"])
    assert sent(lambda: services.todo_create(title="third", description=None)) == ["insert"]
    assert sent(lambda: selectors.todo_get(todo_id=todo_id)) == ["find"]
    assert sent(selectors.todo_list) == ["find"]
    assert sent(lambda: selectors.todo_page(limit=2, after=None)) == ["find"]
    update = lambda: services.todo_update(todo_id=todo_id, title="2nd", description="d")  # noqa: E731
    assert sent(update) == ["findAndModify"]
    assert sent(lambda: services.todo_delete(todo_id=todo_id)) == ["findAndModify"]
    assert sent(services.todos_delete_all) == ["delete"]
    assert set(todos_collection().index_information()) == INDEXES


def test_a_batch_asks_the_server_about_transactions_once(database):
    commit = "update" if database.standalone else "commitTransaction"
    services.todo_create(title="makes the indexes", description=None)
    first = sent(lambda: services.todos_insert_batch(items=[("a", None), ("b", None)]))
    assert first == ["hello", "insert", commit]
    second = sent(lambda: services.todos_insert_batch(items=[("c", None)]))
    assert second == ["insert", commit]


def test_the_indexes_are_made_by_the_first_write_after_the_database_comes_back(
    tmp_path, settings, connect_here
):
    settings.MONGODB_TIMEOUT_MS = 500
    # Standalone, as a plain mongod: while SecantusDB shuts down it can still answer the
    # driver's open monitor connection, without its replica-set name once its listening socket
    # is closed, and pymongo then drops the only member of a replica-set topology for good
    # (servers: []); a real replica set never answers that way.
    server = EmbeddedMongo(tmp_path / "mongo", port=free_port(), standalone=True).start()
    try:
        connect_here(server.uri())
        assert selectors.todo_list() == []  # the driver knows the server (reads need no index)
        server.stop()
        with pytest.raises(ConnectionFailure):
            services.todo_create(title="while down", description=None)

        server.start()
        deadline = time.monotonic() + 60
        with COMMANDS.recording() as names:  # every try until the driver sees it again
            while True:
                try:
                    services.todo_create(title="back", description=None)
                    break
                except ConnectionFailure:
                    assert time.monotonic() < deadline, "the database did not come back"
        assert names.count("createIndexes") >= 3 and names[-1] == "insert"
        assert set(todos_collection().index_information()) == INDEXES
        assert sent(lambda: services.todo_create(title="later", description=None)) == ["insert"]
    finally:
        server.stop()
