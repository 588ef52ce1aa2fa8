"""The post-deployment gate, in the contract's order: (a) the application itself answers, not a
placeholder; (b) /health succeeds; (c) POST /model/pull; (d) /model/status reaches `ready`.

Every failure ends the gate at once with its own exit code and one line of diagnosis.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

from imagegen.ops.client import ServiceClient, Unreachable

PLACEHOLDER_MARK = "Message: File not found."
# Unanswered /model/status polls in a row that end the gate: one or two are a blip (a proxy
# restarting, a slow answer); this many mean the process is gone.
UNREACHABLE_POLLS = 3


class ExitCode(IntEnum):
    """The gate's exit codes, each with its meaning: the one definition that `gate --help`
    lists and docs/operations.md's table repeats (a test holds them equal)."""

    meaning: str

    def __new__(cls, code: int, meaning: str) -> "ExitCode":
        member = int.__new__(cls, code)
        member._value_ = code
        member.meaning = meaning
        return member

    READY = 0, "the model is ready"
    PLACEHOLDER = 10, "a placeholder answers: the container command was overridden"
    HEALTH_TIMEOUT = 11, "/health did not succeed within --health-timeout"
    PULL_REJECTED = 12, "POST /model/pull was refused (e.g. 401: wrong token) or got no answer"
    MODEL_FAILED = (
        13,
        f"the model failed, /model/status answered an error or left {UNREACHABLE_POLLS} "
        "polls in a row unanswered, or the process restarted",
    )
    READY_TIMEOUT = 14, "not ready within --timeout"
    PLATFORM = (
        15,
        "the az step failed (not logged in, no such app, the new revision never became ready)",
    )


class GateFailure(Exception):
    def __init__(self, code: ExitCode, message: str) -> None:
        self.code = code
        super().__init__(message)


@dataclass(frozen=True)
class GateTimings:
    timeout: float  # for the model to become ready, from the pull
    interval: float  # between status polls
    health_timeout: float  # for /health to succeed


def looks_like_placeholder(client: ServiceClient, status: int, body: str) -> bool:
    """The contract's static file server: / is 200 while application routes are 404 HTML."""
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
    """One POST: the service answers it at once (the load runs in the background), so no
    answer within the client's timeout means the pull cannot be relied on."""
    try:
        answer = client.post("/model/pull")
    except Unreachable as error:
        raise GateFailure(
            ExitCode.PULL_REJECTED, f"POST /model/pull got no answer: {error}"
        ) from None
    if not answer.ok:
        raise GateFailure(
            ExitCode.PULL_REJECTED,
            f"POST /model/pull answered {answer.status}: {answer.body[:200]}",
        )
    say(f"pull: accepted ({answer.status}), state {answer.json().get('state')}")


def read_status(client: ServiceClient) -> dict:
    """One /model/status poll; raises Unreachable when nothing answered, and ends the gate
    on an error answer."""
    answer = client.get("/model/status")
    if not answer.ok:
        raise GateFailure(
            ExitCode.MODEL_FAILED,
            f"/model/status answered {answer.status}: {answer.body[:200]}",
        )
    return answer.json()


def is_ready(status: dict, say: Callable[[str], None]) -> bool:
    """True once ready; ends the gate on a state that cannot get there.

    `not_started` after an accepted pull is a new process: the loader moves the state to
    downloading or loading before the pull answers (imagegen.model.loader), and only a
    restart (on Azure, typically an out-of-memory kill during the load) brings it back.
    """
    state = status.get("state")
    if state == "ready":
        say(f"status: ready on {status.get('device')} ({status.get('model_path')})")
        return True
    if state == "failed":
        raise GateFailure(ExitCode.MODEL_FAILED, f"the model failed: {status.get('error')}")
    if state == "not_started":
        raise GateFailure(
            ExitCode.MODEL_FAILED,
            "the process restarted during the load: /model/status is back at not_started "
            "(an out-of-memory kill? see the console logs)",
        )
    download = status.get("download") or {}
    done, total = download.get("bytes_done", 0), download.get("bytes_total", 0)
    say(f"status: {state} ({done}/{total} bytes)")
    return False


def note_unanswered(count: int, error: Unreachable, say: Callable[[str], None]) -> None:
    """A poll went unanswered `count` times in a row: tolerated below UNREACHABLE_POLLS."""
    if count >= UNREACHABLE_POLLS:
        raise GateFailure(
            ExitCode.MODEL_FAILED,
            f"/model/status did not answer {count} polls in a row (last: {error}): "
            "the process is gone or restarting",
        )
    say(f"status: no answer ({count} of {UNREACHABLE_POLLS} in a row): {error}")


def wait_until_ready(
    client: ServiceClient, timings: GateTimings, say: Callable[[str], None]
) -> dict:
    deadline = time.monotonic() + timings.timeout
    unanswered = 0
    state: str | None = "no answer"  # the last answer's state (None: it had none)
    while True:
        try:
            status = read_status(client)
        except Unreachable as error:
            unanswered += 1
            note_unanswered(unanswered, error, say)
            state = "no answer"
        else:
            unanswered = 0
            if is_ready(status, say):
                return status
            state = status.get("state")
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
