"""The model each A1111 caller chose with POST /sdapi/v1/options, where jobs are kept.

A1111 clients switch the model once and then send requests that name none, so the choice must
outlive the request and be the same on every replica: this process's memory in process mode,
Redis in distributed mode (imagegen.distributed.checkpoints). A scope is an API key's name, or
None for the whole service (no keys)."""

import threading
from typing import Protocol


class CheckpointChoices(Protocol):
    def chosen(self, scope: str | None) -> str | None:
        """The repo id chosen for `scope`; None when none was."""

    def choose(self, scope: str | None, model_id: str) -> None:
        """Keeps `model_id` as `scope`'s choice."""


class LocalCheckpoints:
    """This process's choices: in-process mode has one web process taking jobs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._chosen: dict[str | None, str] = {}

    def chosen(self, scope: str | None) -> str | None:
        with self._lock:
            return self._chosen.get(scope)

    def choose(self, scope: str | None, model_id: str) -> None:
        with self._lock:
            self._chosen[scope] = model_id
