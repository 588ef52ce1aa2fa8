"""Titles are unique under concurrency, and a batch is all-or-nothing even when raced."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from scripts.embedded_mongo import EmbeddedMongo
from tests.support.in_process import todos_here
from tests.support.processes import free_port


@pytest.fixture(scope="module", params=["replica set", "standalone"])
def app(request, tmp_path_factory):
    """Both ways a batch stays whole: a transaction on a replica set (the suite's database),
    pending-then-commit on a standalone server (which has no transactions). The app is served
    from this process, its requests on threads of their own, so they race as under gunicorn."""
    if request.param == "replica set":
        with todos_here(request.getfixturevalue("mongo").uri("races")) as server:
            yield server
        return
    work = tmp_path_factory.mktemp("races")
    with (
        EmbeddedMongo(work / "mongo", port=free_port(), standalone=True) as mongo,
        todos_here(mongo.uri()) as server,
    ):
        yield server


def conflict(response) -> None:
    assert response.status_code == 409, response.text
    body = response.json()
    assert body["data"] is None
    assert "title must be unique" in body["error"]["message"]


def titles(app) -> list[str]:
    return [t["title"] for t in requests.get(app.url("/todos"), timeout=10).json()["data"]]


def test_duplicate_title_on_create_update_and_batch(app, http, create):
    create("taken")
    other = create("other")
    conflict(http.post(app.url("/todo"), json={"todo": {"title": "taken"}}))
    conflict(http.put(app.url(f"/todo/{other['id']}"), json={"todo": {"title": "taken"}}))
    conflict(http.patch(app.url("/todos"), json={"todos": [{"title": "new"}, {"title": "taken"}]}))
    conflict(http.patch(app.url("/todos"), json={"todos": [{"title": "dup"}, {"title": "dup"}]}))
    assert titles(app) == ["taken", "other"]


def test_updating_a_todo_to_its_own_title_is_allowed(app, http, create):
    todo = create("same")
    response = http.put(app.url(f"/todo/{todo['id']}"), json={"todo": {"title": "same"}})
    assert response.status_code == 202


def run_together(calls: list) -> list:
    barrier = threading.Barrier(len(calls))

    def run(call):
        barrier.wait()
        return call()

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(run, calls))


def test_eight_concurrent_creates_of_one_title_give_one_201(app):
    def create():
        return requests.post(app.url("/todo"), json={"todo": {"title": "race"}}, timeout=30)

    responses = run_together([create] * 8)
    assert sorted(r.status_code for r in responses) == [201] + [409] * 7
    assert titles(app) == ["race"]


def test_eight_concurrent_renames_to_one_title_give_one_202(app, create):
    todos = [create(f"todo {i}") for i in range(8)]

    def rename(todo):
        return lambda: requests.put(
            app.url(f"/todo/{todo['id']}"), json={"todo": {"title": "winner"}}, timeout=30
        )

    responses = run_together([rename(t) for t in todos])
    assert sorted(r.status_code for r in responses) == [202] + [409] * 7
    assert titles(app).count("winner") == 1


def test_raced_batches_are_all_or_nothing_and_never_seen_half_written(app):
    """A batch racing a create for one of its titles either lands whole or not at all, and a
    reader polling meanwhile never sees part of it."""
    seen_partial: list[int] = []
    stop = threading.Event()

    def watch(batch_titles: set[str]) -> None:
        while not stop.is_set():
            present = batch_titles & set(titles(app))
            if present and present != batch_titles:
                seen_partial.append(len(present))

    for round_ in range(8):
        requests.delete(app.url("/todos"), timeout=10)
        batch = [{"title": f"r{round_} item {i}"} for i in range(30)] + [{"title": "contested"}]
        batch_titles = {t["title"] for t in batch}
        stop.clear()
        # "contested" may come from the single create; the batch's own titles must move together.
        watcher = threading.Thread(target=watch, args=(batch_titles - {"contested"},))
        watcher.start()
        try:
            insert, single = run_together([
                lambda b=batch: requests.patch(app.url("/todos"), json={"todos": b}, timeout=30),
                lambda: requests.post(
                    app.url("/todo"), json={"todo": {"title": "contested"}}, timeout=30
                ),
            ])  # fmt: skip
        finally:
            stop.set()
            watcher.join()

        stored = set(titles(app))
        assert sorted([insert.status_code, single.status_code]) == [201, 409]
        if insert.status_code == 201:
            assert batch_titles <= stored
            assert single.status_code == 409
        else:
            conflict(insert)
            assert not (batch_titles - {"contested"}) & stored
        assert ("contested" in stored) == (201 in (insert.status_code, single.status_code))
    assert seen_partial == []


def test_two_batches_sharing_a_title_never_both_land(app):
    a = [{"title": f"a{i}"} for i in range(20)] + [{"title": "shared"}]
    b = [{"title": "shared"}] + [{"title": f"b{i}"} for i in range(20)]
    responses = run_together([
        lambda: requests.patch(app.url("/todos"), json={"todos": a}, timeout=30),
        lambda: requests.patch(app.url("/todos"), json={"todos": b}, timeout=30),
    ])  # fmt: skip
    codes = sorted(r.status_code for r in responses)
    assert codes in ([201, 409], [409, 409])
    stored = set(titles(app))
    a_titles, b_titles = {t["title"] for t in a}, {t["title"] for t in b}
    assert stored in (set(), a_titles, b_titles)


def test_a_failing_batch_is_never_visible_while_it_is_undone(app, create):
    """The batch below is written up to its last item, then undone; readers see none of it."""
    create("blocker")
    batch = [{"title": f"doomed {i}"} for i in range(300)] + [{"title": "blocker"}]
    seen: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.append(len(titles(app)))

    watchers = [threading.Thread(target=watch) for _ in range(3)]
    for watcher in watchers:
        watcher.start()
    try:
        for _ in range(3):
            conflict(requests.patch(app.url("/todos"), json={"todos": batch}, timeout=30))
    finally:
        stop.set()
        for watcher in watchers:
            watcher.join()
    assert set(seen) == {1}
    assert titles(app) == ["blocker"]
