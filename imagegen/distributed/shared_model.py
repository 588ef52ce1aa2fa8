"""The model of a distributed deployment as a web process sees it: the share and every worker.

A pull downloads once, here, onto the share; web processes never load the model. Every running
worker then loads when it sees the pull count grow. The `state` rules of GET /model/status are
in docs/distributed.md. When Redis does not answer in time, the answer is still 200, marked
`store: "unreachable"`. A MODELS entry has a SharedModel of its own: its pull count, and the
states of the workers that may run it (WORKER_MODELS)."""

import json
import logging
import threading
import time
from dataclasses import dataclass, field

import redis

from imagegen.distributed.store import PULLS, WORKERS, decoded, pull_key, worker_key
from imagegen.errors import ModelDownloading, ModelFailed, ModelNotPulled
from imagegen.model import hub
from imagegen.model.loader import ModelLoader
from imagegen.model.loras_pull import pull_with_loras
from imagegen.model.pull_failures import explain_pull_failure
from imagegen.model.status import ModelStatus, WorkerModel

log = logging.getLogger(__name__)


def live_workers(client: redis.Redis) -> list[dict]:
    """Those whose heartbeat is gone are removed from the list."""
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
    """The workers and the pull count as read, and when."""

    workers: list[dict]
    pulls: int
    at: float = field(default_factory=time.monotonic)


def may_run(worker: dict, model_id: str, *, default: bool) -> bool:
    """Whether the worker's WORKER_MODELS lets it run the model (a record without the field
    runs MODEL_ID alone)."""
    return model_id in worker.get("worker_models", [model_id] if default else [])


class SharedModel:
    def __init__(self, loader: ModelLoader, client: redis.Redis, *, default: bool = True) -> None:
        # Used for its source and status fields only: it never loads here.
        self.loader = loader
        self.source = loader.source
        self.model_id = loader.source.model_id
        self.default = default  # MODEL_ID's, whose state is each record's `state`
        self.pulls_key = PULLS if default else pull_key(self.model_id)
        self.redis = client
        self._lock = threading.Lock()
        self._downloading: threading.Thread | None = None
        self._error: str | None = None
        self._progress = hub.DownloadProgress()
        self._seen = Seen([], 0)  # nothing seen yet: no worker

    def pull(self) -> bool:
        """Downloads if the share lacks a complete copy, then has every worker load.

        False when every live worker that may run it is ready already and the share holds every
        file (LORAS and UPSCALERS may lack some)."""
        workers = self._runners(live_workers(self.redis))
        ready = workers and all(self._state_of(w) == "ready" for w in workers)
        if ready and self._all_on_share():
            return False
        with self._lock:
            if self._downloading is not None and self._downloading.is_alive():
                return True
            if self._all_on_share():
                self._error = None
                self.redis.incr(self.pulls_key)
                return True
            self._error = None
            self._progress = hub.DownloadProgress()
            self._downloading = threading.Thread(
                target=self._download, args=(self._progress,), name="model-pull", daemon=True
            )
            self._downloading.start()
        return True

    def _all_on_share(self) -> bool:
        return self.source.complete_manifest() is not None and not self.loader.extras_missing()

    def _download(self, progress: hub.DownloadProgress) -> None:
        try:
            # The model, then LORAS's files, then UPSCALERS' (the loader's extra files).
            pull_with_loras(self.source, progress, extras=self.loader.extra_files)
            self.redis.incr(self.pulls_key)
        except Exception as exc:
            log.exception("model download failed")
            with self._lock:
                self._error = explain_pull_failure(exc, self.source)

    def _runners(self, workers: list[dict]) -> list[dict]:
        return [w for w in workers if may_run(w, self.model_id, default=self.default)]

    def _state_of(self, worker: dict) -> str:
        if self.default:
            return worker["state"]
        return worker.get("states", {}).get(self.model_id, "not_started")

    def _pulls_of(self, worker: dict) -> int:
        if self.default:
            return worker["pulls"] or 0
        return (worker.get("model_pulls") or {}).get(self.model_id, 0)

    def _download_running(self) -> bool:
        return self._downloading is not None and self._downloading.is_alive()

    def check_loadable(self) -> None:
        """Refuses what no worker could load soon.

        Nothing on the share, or a download under way or failed."""
        if self.source.complete_manifest() is not None:
            return
        with self._lock:
            if self._download_running():
                raise ModelDownloading()
            if self._error is not None:
                raise ModelFailed(self._error)
        raise ModelNotPulled()

    def _read_workers(self) -> tuple[Seen, str]:
        """What this process last saw, when Redis does not answer.

        The gate fails on anything but 2xx. A store blip must not fail a deployment."""
        try:
            self._seen = Seen(live_workers(self.redis), int(self.redis.get(self.pulls_key) or 0))
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
        runners = self._runners(workers)
        states = {self._state_of(w) for w in runners}
        pending = any(self._pulls_of(w) < pulls and self._state_of(w) != "failed" for w in runners)
        failed = next((w["error"] for w in runners if self._state_of(w) == "failed"), None)
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
                WorkerModel(
                    name=w["name"],
                    state=w["state"],
                    error=w["error"],
                    job=w["job"],
                    models=w.get("models", []),
                    worker_models=w.get("worker_models", []),
                    loads=w.get("loads", {}),
                    swaps=w.get("swaps", {}),
                )
                for w in workers
            ],
            store=store,
            store_age_seconds=round(time.monotonic() - seen.at, 1),
        )
        return ModelStatus(**base)
