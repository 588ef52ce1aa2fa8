"""The web replica under gunicorn waits on the job store's announcements (its change
feed): a request following a job holds one subscription of its process to the store's
channel and learns of a change at once, with a real redis-server and no worker (the job's
transitions are the store's own calls). How the waiting itself behaves, in process:
tests/imagegen/distributed/test_job_store.py; what it costs: docs/performance.md."""

import time
from pathlib import Path

from imagegen.distributed.store import CHANGED, JobStore
from imagegen.generation.requests import GenerationRequest
from tests.support.distributed import RedisServer
from tests.support.processes import AppServer
from tests.support.sse import open_stream, read_events

REQUEST = GenerationRequest(prompt="followed", steps=4, guidance=0.0, seed=1)


def test_a_replica_following_a_job_is_subscribed_and_told_of_its_next_step(tmp_path: Path):
    with RedisServer(tmp_path / "redis") as server:
        client = server.client()
        store = JobStore(client, heartbeat_ttl=30)
        assert store.add("a", REQUEST, owner=None, batch=None, queue_max=4, keep=20)
        store.claim("w1")
        # A call budget far below the time the subscription lives: the listener's connection
        # is its own, not a budgeted call that would be cut off and resubscribe over and over.
        env = {"JOB_BROKER_URL": server.url, "MONGODB_URI": "mongodb://127.0.0.1:9/unused",
               "JOB_STORE_TIMEOUT_MS": "500"}  # fmt: skip
        with (
            AppServer(env, tmp_path / "web.log") as app,
            open_stream(app.url("/jobs/a/events")) as stream,
        ):
            events = read_events(stream)
            assert next(events).name == "running"
            deadline = time.monotonic() + 10
            while client.pubsub_numsub(CHANGED) != [(CHANGED.encode(), 1)]:
                assert time.monotonic() < deadline, "the replica never subscribed"
                time.sleep(0.05)
            time.sleep(2)  # four call budgets
            sent = time.monotonic()
            store.update("a", 1, step=1, steps=4)
            step = next(events)
            assert step.name == "step" and step.data["step"] == 1
            assert time.monotonic() - sent < 0.5  # at the announcement, not a second later
            # The job ends, so does its stream: gunicorn then stops with no request open
            # (not after its graceful timeout).
            store.finish("a", 1, state="cancelled", phase="cancelled while running")
            assert [event.data["state"] for event in events][-1] == "cancelled"
        assert "subscription lost" not in app.log_path.read_text()
