"""The ModelHandle of a web process in distributed mode (imagegen.model.status): the model of
the deployment as that process sees it, the share and every worker process's own model state.

Each worker is a process in the contract's sense: `not_started` when it starts, even on a warm
share, until a pull reaches it or its first job loads the model from the share. A pull is
downloaded once, here in the web process (lock-free onto the share, as in the in-process
mode; web processes never load the model), then counted in the store, and every running
worker loads when it sees the count grow (imagegen.distributed.worker).

The top-level `state` of GET /model/status answers "can this deployment generate?":

- `downloading` while this web process downloads a pull;
- else `ready` when at least one live worker is ready;
- else `loading` when a worker is loading, or has not taken the latest pull yet;
- else `failed` when a worker's load or this process's download failed (`error` says which);
- else `not_started`.

`workers` lists each live worker (name, its own state and error, the job it runs). When the
store does not answer in time, the answer is still 200: what this process last saw, marked
`store: "unreachable"` with its age (`store_age_seconds`).
"""

import json
import logging
import threading
import time
from dataclasses import dataclass, field

import redis

from imagegen.distributed.store import PULLS, WORKERS, decoded, worker_key
from imagegen.errors import ModelDownloading, ModelFailed, ModelNotPulled
from imagegen.model import hub
from imagegen.model.loader import ModelLoader
from imagegen.model.pull_failures import explain_pull_failure
from imagegen.model.status import ModelStatus, WorkerModel

log = logging.getLogger(__name__)


def live_workers(client: redis.Redis) -> list[dict]:
    """The workers whose heartbeat is there (the others are removed from the list)."""
    names = sorted(decoded(name) for name in client.smembers(WORKERS))
    if not names:
        return []
    values = client.mget([worker_key(name) for name in names])
    gone = [name for name, value in zip(names, values, strict=True) if value is None]
    if gone:
        client.srem(WORKERS, *gone)
    return [json.loads(value) for value in values if value is not None]


@dataclass(frozen=True)
class Seen:
    """The workers and the pull count as read from the store, and when."""

    workers: list[dict]
    pulls: int
    at: float = field(default_factory=time.monotonic)


class SharedModel:
    def __init__(self, loader: ModelLoader, client: redis.Redis) -> None:
        # The web process's loader is used for its source and its status fields only: it
        # never loads here (its state is not this deployment's).
        self.loader = loader
        self.source = loader.source
        self.redis = client
        self._lock = threading.Lock()
        self._downloading: threading.Thread | None = None
        self._error: str | None = None
        self._progress = hub.DownloadProgress()
        self._seen = Seen([], 0)  # nothing seen yet: no worker

    def pull(self) -> bool:
        """Starts the download (when the share lacks a complete copy) and then has every
        running worker load; False when every live worker is ready already."""
        workers = live_workers(self.redis)
        if workers and all(w["state"] == "ready" for w in workers):
            return False
        with self._lock:
            if self._downloading is not None and self._downloading.is_alive():
                return True
            if self.source.complete_manifest() is not None:
                self._error = None
                self.redis.incr(PULLS)
                return True
            self._error = None
            self._progress = hub.DownloadProgress()
            self._downloading = threading.Thread(
                target=self._download, args=(self._progress,), name="model-pull", daemon=True
            )
            self._downloading.start()
        return True

    def _download(self, progress: hub.DownloadProgress) -> None:
        try:
            hub.download_to_share(self.source, progress)
            self.redis.incr(PULLS)
        except Exception as exc:
            log.exception("model download failed")
            with self._lock:
                self._error = explain_pull_failure(exc, self.source)

    def _download_running(self) -> bool:
        return self._downloading is not None and self._downloading.is_alive()

    def check_loadable(self) -> None:
        """Refuses at once what no worker could load soon: nothing on the share, a download
        under way or failed. A worker loads the model from the share for its first job."""
        if self.source.complete_manifest() is not None:
            return
        with self._lock:
            if self._download_running():
                raise ModelDownloading()
            if self._error is not None:
                raise ModelFailed(self._error)
        raise ModelNotPulled()

    def _read_workers(self) -> tuple[Seen, str]:
        """The workers and the pull count, with whether they were read now or are what this
        process last saw (Redis did not answer within JOB_STORE_TIMEOUT_MS, or too many
        requests wait on it): the deployment gate fails on any answer but 2xx, and a blip of
        the store must not fail a deployment."""
        try:
            self._seen = Seen(live_workers(self.redis), int(self.redis.get(PULLS) or 0))
            return self._seen, "reachable"
        except redis.RedisError as exc:
            log.warning("model status from what was last seen: job store unreachable: %s", exc)
            return self._seen, "unreachable"

    def status(self) -> ModelStatus:
        base = self.loader.status().model_dump()
        seen, store = self._read_workers()
        workers, pulls = seen.workers, seen.pulls
        with self._lock:
            downloading, error, progress = self._download_running(), self._error, self._progress
        states = {w["state"] for w in workers}
        pending = any(w["pulls"] < pulls and w["state"] != "failed" for w in workers)
        failed = next((w["error"] for w in workers if w["state"] == "failed"), None)
        if downloading:
            state = "downloading"
        elif "ready" in states:
            state, error = "ready", None
        elif "loading" in states or pending:
            state, error = "loading", None
        elif failed is not None or error is not None:
            state, error = "failed", failed or error
        else:
            state = "not_started"
        base.update(
            state=state,
            error=error,
            download={"bytes_done": progress.bytes_done, "bytes_total": progress.bytes_total},
            workers=[
                WorkerModel(name=w["name"], state=w["state"], error=w["error"], job=w["job"])
                for w in workers
            ],
            store=store,
            store_age_seconds=round(time.monotonic() - seen.at, 1),
        )
        return ModelStatus(**base)
