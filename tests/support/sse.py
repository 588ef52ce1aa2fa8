"""A plain Server-Sent Events reader for the tests, over requests' streamed body: events as
the wire carries them (id, event name, JSON data), comments included, nothing smoothed."""

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import requests


@dataclass
class Event:
    name: str = "message"
    id: str | None = None
    data: Any = None
    comments: list[str] = field(default_factory=list)  # comment lines since the last event


def read_events(response: requests.Response) -> Iterator[Event]:
    """Each dispatched event; ends when the server closes the stream."""
    current, data_lines, comments = Event(), [], []
    for line in response.iter_lines(decode_unicode=True):
        if line == "":
            if data_lines:
                current.data = json.loads("\n".join(data_lines))
                current.comments = comments
                yield current
                comments = []
            current, data_lines = Event(), []
        elif line.startswith(":"):
            comments.append(line[1:].strip())
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data":
                data_lines.append(value)
            elif name == "event":
                current.name = value
            elif name == "id":
                current.id = value


def open_stream(
    url: str, *, last_event_id: str | None = None, headers: dict | None = None
) -> requests.Response:
    sent = dict(headers or {})
    if last_event_id is not None:
        sent["Last-Event-ID"] = last_event_id
    return requests.get(url, headers=sent, stream=True, timeout=60)
