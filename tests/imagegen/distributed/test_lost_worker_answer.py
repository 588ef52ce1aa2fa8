"""What a synchronous request answers when its job loses its workers, on a web replica's
routes served in this process over a real redis-server: it waits through the first loss (the
job is queued again) and is answered at the second, 503 with Retry-After naming both workers.
The workers are the store's own calls (claim, and time passing without their beats); a
worker process killed under a job, end to end: tests/imagegen/distributed/test_replicas.py."""

import threading
import time
from pathlib import Path

import requests

from imagegen.distributed.store import JobStore
from imagegen.generation.job_board import JobState
from tests.support.distributed import RedisServer, replica_here
from tests.support.local_hub import LocalHub
from tests.support.model_service import model_service_env

TTL = 1.0  # the judging store's JOB_HEARTBEAT_TTL (the replica's own, at least 3 s, acts later)


def reachable_for(store: JobStore, seconds: float) -> None:
    """Time passes with the store reachable and seen so, as live workers' beats make it."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        store.beat("no such job", 1)
        time.sleep(0.05)


def test_a_synchronous_request_waits_through_a_lost_worker_and_is_answered_at_the_second(
    hub_root: Path, tmp_path: Path
):
    with LocalHub(hub_root) as hub, RedisServer(tmp_path / "redis") as server:
        env = {
            **model_service_env(hub.url, tmp_path / "share", tmp_path),
            "JOB_BROKER_URL": server.url,
        }
        store = JobStore(server.client(), heartbeat_ttl=TTL)
        with replica_here(**env) as app:
            assert requests.post(app.url("/model/pull"), timeout=10).status_code == 202
            deadline = time.monotonic() + 60  # downloaded to the share; no worker loads it
            while not requests.get(app.url("/model/status"), timeout=10).json()["weights_on_share"]:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            answer: list[requests.Response | Exception] = []

            def ask() -> None:
                data = {"prompt": "loses two workers", "size": "64x64"}
                try:
                    answer.append(requests.post(app.url("/generate"), data=data, timeout=60))
                except Exception as error:  # reported by the assertion below
                    answer.append(error)

            waiting = threading.Thread(target=ask)
            waiting.start()
            deadline = time.monotonic() + 30
            while not (taken := store.claim("w1")):
                assert time.monotonic() < deadline, "the request queued nothing"
                time.sleep(0.05)
            reachable_for(store, 1.2 * TTL)
            assert store.sweep() == [(taken.job_id, "requeued")]
            time.sleep(1.5)  # the waiting request reads its job again meanwhile
            assert waiting.is_alive() and not answer  # it keeps waiting for the second run
            assert store.claim("w2").job_id == taken.job_id
            reachable_for(store, 1.2 * TTL)
            assert store.sweep() == [(taken.job_id, "failed")]
            waiting.join(30)
            assert store.view(taken.job_id).state is JobState.FAILED
    assert answer and isinstance(answer[0], requests.Response), answer
    assert answer[0].status_code == 503, answer[0].text
    assert int(answer[0].headers["Retry-After"]) > 0
    message = answer[0].json()["error"]["message"]
    assert "lost 2 workers, w1 and w2" in message, message
