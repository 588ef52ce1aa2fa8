"""A job's progress as Server-Sent Events, built from JobViews alone.

Why the stream is built this way:

- It reads nothing but JobViews from a `wait(after, timeout)` callable (the selector
  `job_wait`), so any job store that can say "the job changed past revision n" (the
  in-process queue, a shared one) drives it unchanged.
- The server may wake once for several steps (a fast model, a busy machine): step events are
  made from the step numbers, one for each step the client has not been sent, so none is
  lost or sent twice.
- An event's id says what the client has seen (its last step, and a digest of the job's
  state, queue position and phase), not where it was in one connection. A client that
  reconnects with `Last-Event-ID` (the stream ends itself before Azure's 240 s cut) gets
  exactly what it missed, from any replica that knows the job.
- A `preview` event (imagegen.generation.previews) follows the step events of the wake that
  saw it: the latest preview only, never one per step, and without an `id`, so it is never
  replayed: a client resuming gets what it missed, then the latest preview once if it is
  newer than its last step. Previews are pictures of a moment; a late one is no use.
"""

import hashlib
import json
import re
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

from imagegen.generation.job_board import FINISHED, JobView
from imagegen.generation.previews import Preview

# `<last step sent>.<digest of the status sent>`; documented as opaque. Empty: none (a new
# stream), as a header a client sends without a value.
EVENT_ID_PATTERN = r"^([0-9]{1,6}\.[0-9a-f]{8})?$"
_EVENT_ID = re.compile(EVENT_ID_PATTERN)
# How long a client waits before reconnecting after the stream ends (its `retry` field).
RECONNECT_MS = 1000


@dataclass(frozen=True)
class Seen:
    """What a client has been sent: the last step, and the digest of the last status."""

    step: int
    status: str

    @property
    def event_id(self) -> str:
        return f"{self.step}.{self.status}"

    @classmethod
    def from_event_id(cls, event_id: str) -> "Seen":
        if not _EVENT_ID.match(event_id):
            raise ValueError("must be the id of an event of this stream")
        step, status = event_id.split(".")
        return cls(int(step), status)


@dataclass(frozen=True)
class Event:
    name: str
    id: str
    data: dict[str, Any]

    def encode(self) -> bytes:
        data = json.dumps(self.data, separators=(",", ":"))
        return f"id: {self.id}\nevent: {self.name}\ndata: {data}\n\n".encode()


def preview_event(preview: Preview) -> bytes:
    """A preview as an event of its own, with no `id` (never replayed)."""
    data = {"step": preview.step, "steps": preview.steps, "width": preview.width,
            "height": preview.height, "image": preview.data_url()}  # fmt: skip
    return f"event: preview\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def status_digest(view: JobView) -> str:
    """What a status event reports, as a digest: a new one is sent when it changes."""
    text = f"{view.state.value}|{view.position}|{view.phase}"
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def events_since(
    view: JobView, seen: Seen, describe: Callable[[JobView], dict[str, Any]]
) -> tuple[list[Event], Seen]:
    """The events that bring a client from `seen` to `view`: when the state, position or
    phase changed, one event named after the state carrying the whole job (`describe`, its
    progress the latest), and one `step` event per step it has not been sent. A job still
    under way announces its state first, so a client sees `running` before the steps of a
    job it saw queued (a store that is polled may show both at once); a finished one sends
    the steps first, so its final state is the last event."""
    events = []
    progress = view.progress
    digest = status_digest(view)
    changed = digest != seen.status
    if changed and view.state not in FINISHED:
        seen = Seen(seen.step, digest)
        events.append(Event(view.state.value, seen.event_id, describe(view)))
        changed = False
    for step in range(seen.step + 1, progress.step + 1):
        seen = Seen(step, seen.status)
        fraction = round(step / progress.steps, 4) if progress.steps else 0.0
        data = {"step": step, "steps": progress.steps, "fraction": fraction,
                "eta_seconds": progress.eta_seconds}  # fmt: skip
        events.append(Event("step", seen.event_id, data))
    if changed:
        seen = Seen(seen.step, digest)
        events.append(Event(view.state.value, seen.event_id, describe(view)))
    return events, seen


def job_event_stream(
    *,
    wait: Callable[[int, float], JobView | None],
    seen: Seen | None,
    describe: Callable[[JobView], dict[str, Any]],
    life: float,
    keepalive: float,
    preview: Callable[[], Preview | None] | None = None,
) -> Generator[bytes, None, None]:
    """The bytes of one stream. A new one (no `seen`) starts with the job as it is now; one
    resumed from `seen` sends what the client missed. It ends after the final state, after
    `life` seconds (the client resumes), or when the job is gone; a comment goes out after
    `keepalive` seconds without a change. `preview()` reads the job's latest preview, sent
    when the job's `preview_step` passes the last one sent (for a resumed stream: the
    client's last step)."""
    deadline = time.monotonic() + life
    revision = -1
    preview_sent = 0 if seen is None else seen.step
    yield f"retry: {RECONNECT_MS}\n\n".encode()
    while (remaining := deadline - time.monotonic()) > 0:
        view = wait(revision, min(keepalive, remaining))
        if view is None:
            return
        if view.revision == revision:
            yield b": keep-alive\n\n"
            continue
        revision = view.revision
        if seen is None:  # a new stream: its first event is the job, progress included
            seen = Seen(view.progress.step, "")
        events, seen = events_since(view, seen, describe)
        for event in events:
            yield event.encode()
        if view.state in FINISHED:
            return
        if preview is not None and view.preview_step > preview_sent:
            latest = preview()
            if latest is not None and latest.step > preview_sent:
                preview_sent = latest.step
                yield preview_event(latest)


class ClosingStream:
    """A stream's bytes and what frees its place (`on_close`, which must allow a second call),
    run when the stream ends and whenever the server is done with it: the client left, or it
    never started (Django closes the response in every case; a generator that never started
    would skip its own `finally`)."""

    def __init__(self, chunks: Generator[bytes, None, None], on_close: Callable[[], None]) -> None:
        self._chunks = chunks
        self._on_close = on_close

    def __iter__(self) -> Iterator[bytes]:
        yield from self._chunks
        # Ended: the place is free before the server writes the stream's end, so a client
        # that opens its next stream on reading that end finds it free (`on_close` runs once).
        self._on_close()

    def close(self) -> None:
        try:
            self._chunks.close()
        finally:
            self._on_close()
