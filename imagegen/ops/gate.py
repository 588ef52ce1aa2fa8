"""The post-deployment gate, in the seed's order: (a) the application itself answers, not a
placeholder; (b) /health succeeds; (c) POST /model/pull; (d) /model/status reaches `ready`.

Every failure ends the gate at once with its own exit code and one line of diagnosis.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass

from imagegen.ops.client import ServiceClient, Unreachable

PLACEHOLDER_MARK = "Message: File not found."
UNREACHABLE_POLLS = 3


class ExitCode:
    READY = 0
    PLACEHOLDER = 10
    HEALTH_TIMEOUT = 11
    PULL_REJECTED = 12
    MODEL_FAILED = 13
    READY_TIMEOUT = 14
    PLATFORM = 15


class GateFailure(Exception):
    def __init__(self, code: int, message: str) -> None:
        self.code = code
        super().__init__(message)


@dataclass(frozen=True)
class GateTimings:
    timeout: float  # for the model to become ready, from the pull
    interval: float  # between status polls
    health_timeout: float  # for /health to succeed


def looks_like_placeholder(client: ServiceClient, status: int, body: str) -> bool:
    """The seed's static file server: / is 200 while application routes are 404 HTML."""
    if status != 404 or PLACEHOLDER_MARK not in body:
        return False
    try:
        return client.get("/").status == 200
    except Unreachable:
        return False


def wait_for_health(
    client: ServiceClient, timings: GateTimings, say: Callable[[str], None]
) -> None:
    deadline = time.monotonic() + timings.health_timeout
    last = "nothing answered"
    while True:
        try:
            answer = client.get("/health")
            if looks_like_placeholder(client, answer.status, answer.body):
                raise GateFailure(
                    ExitCode.PLACEHOLDER,
                    "a static file server answers instead of the application: the container "
                    "command was overridden; remove the override so the image's own command "
                    "runs (az containerapp update ... --yaml without `command`, or rerun the "
                    "gate with --container-app NAME --resource-group RG)",
                )
            if answer.ok:
                say(f"health: ok ({answer.body.strip()})")
                return
            last = f"/health answered {answer.status}"
        except Unreachable as error:
            last = f"nothing answered ({error})"
        if time.monotonic() >= deadline:
            raise GateFailure(
                ExitCode.HEALTH_TIMEOUT,
                f"/health did not succeed within {timings.health_timeout:g}s: {last}",
            )
        time.sleep(min(1.0, timings.interval))


def pull(client: ServiceClient, say: Callable[[str], None]) -> None:
    answer = client.post("/model/pull")
    if not answer.ok:
        raise GateFailure(
            ExitCode.PULL_REJECTED,
            f"POST /model/pull answered {answer.status}: {answer.body[:200]}",
        )
    say(f"pull: accepted ({answer.status}), state {answer.json().get('state')}")


def wait_until_ready(
    client: ServiceClient, timings: GateTimings, say: Callable[[str], None]
) -> dict:
    deadline = time.monotonic() + timings.timeout
    while True:
        try:
            answer = client.get("/model/status")
        except Unreachable as error:
            raise GateFailure(
                ExitCode.MODEL_FAILED, f"/model/status unreachable: {error}"
            ) from None
        if not answer.ok:
            raise GateFailure(
                ExitCode.MODEL_FAILED,
                f"/model/status answered {answer.status}: {answer.body[:200]}",
            )
        status = answer.json()
        state = status.get("state")
        if state == "ready":
            say(f"status: ready on {status.get('device')} ({status.get('model_path')})")
            return status
        if state == "failed":
            raise GateFailure(ExitCode.MODEL_FAILED, f"the model failed: {status.get('error')}")
        download = status.get("download") or {}
        done, total = download.get("bytes_done", 0), download.get("bytes_total", 0)
        say(f"status: {state} ({done}/{total} bytes)")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise GateFailure(
                ExitCode.READY_TIMEOUT,
                f"the model was not ready within {timings.timeout:g}s (last state: {state})",
            )
        time.sleep(min(timings.interval, remaining))


def run_gate(client: ServiceClient, timings: GateTimings, say: Callable[[str], None]) -> dict:
    wait_for_health(client, timings, say)
    pull(client, say)
    return wait_until_ready(client, timings, say)
