"""A job's progress as Server-Sent Events, built from JobViews alone, so any board drives it.

Step events come from step numbers, so none is lost or doubled. An event's id says what the
client has seen, so `Last-Event-ID` resumes on any replica."""

import hashlib
import json
import re
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

from imagegen.generation.job_board import FINISHED, JobView
from imagegen.generation.previews import Preview

# `<last step sent>.<digest of the status sent>`, documented as opaque. Empty means a new stream.
EVENT_ID_PATTERN = r"^([0-9]{1,6}\.[0-9a-f]{8})?$"
_EVENT_ID = re.compile(EVENT_ID_PATTERN)
# The client's wait before reconnecting (the `retry` field).
RECONNECT_MS = 1000


@dataclass(frozen=True)
class Seen:
    """The last step sent, and the digest of the last status sent."""

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
    """Without an `id`, so it is never replayed."""
    data = {"step": preview.step, "steps": preview.steps, "width": preview.width,
            "height": preview.height, "image": preview.data_url()}  # fmt: skip
    return f"event: preview\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def status_digest(view: JobView) -> str:
    """A new status event is sent when this changes."""
    text = f"{view.state.value}|{view.position}|{view.phase}"
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def events_since(
    view: JobView, seen: Seen, describe: Callable[[JobView], dict[str, Any]]
) -> tuple[list[Event], Seen]:
    """The events that bring a client from `seen` to `view`.

    A running job sends its state before its steps; a finished one sends its state last."""
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
    """Ends after the final state, after `life` seconds (the client resumes), or when the job is
    gone.

    A comment keeps it alive after `keepalive` quiet seconds."""
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
    """A stream that frees its place (`on_close`) whenever the server is done with it.

    Django closes even a response that never started; its generator would skip its `finally`.
    `on_close` must allow a second call."""

    def __init__(self, chunks: Generator[bytes, None, None], on_close: Callable[[], None]) -> None:
        self._chunks = chunks
        self._on_close = on_close

    def __iter__(self) -> Iterator[bytes]:
        yield from self._chunks
        # Free the place before writing the end, so a client reconnecting at once finds it free.
        self._on_close()

    def close(self) -> None:
        try:
            self._chunks.close()
        finally:
            self._on_close()
