"""An HTTP service on 127.0.0.1 whose answers follow a script, for what the real app does
only by accident: a pull that never answers, a /model/status that stops answering for a
while, a process that restarts during the load (its status back at `not_started`).

    script = {"GET /health": [Reply(200, {"status": "healthy"})],
              "GET /model/status": [model_state("loading"), DROP, model_state("ready")]}

Each request to a route takes that route's next step; the last step repeats. Unscripted
routes answer 404. A step is a `Reply`, `DROP` (the request is read, then the connection is
closed without an answer: a process going away) or `HANG` (the request is read and never
answered: the client's own timeout ends it).
"""

from __future__ import annotations

import functools
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DROP = "drop"
HANG = "hang"


@dataclass(frozen=True)
class Reply:
    status: int
    payload: object  # sent as JSON


Step = Reply | str


def model_state(state: str, status: int = 200) -> Reply:
    """A /model/status (or pull) answer in the app's shape, in the given state."""
    return Reply(
        status,
        {
            "state": state,
            "device": "cpu",
            "model_path": "/models/testorg--tiny-sd",
            "error": None,
            "download": {"bytes_done": 0, "bytes_total": 0},
        },
    )


class ScriptedService:
    """Serves a script (see the module) on a free loopback port, in daemon threads.

    `requests` lists every request received, as "METHOD /path", in order.
    """

    def __init__(self, script: dict[str, list[Step]]) -> None:
        assert all(script.values()), "every scripted route needs at least one step"
        self.script = {route: list(steps) for route, steps in script.items()}
        self._taken: dict[str, int] = {}
        self._log: list[str] = []
        self._lock = threading.Lock()
        self.stopping = threading.Event()  # releases HANG steps on stop()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> ScriptedService:
        handler = type("Handler", (_Handler,), {"service": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        serve = functools.partial(self._server.serve_forever, poll_interval=0.05)
        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            assert self._thread is not None
            self._thread.join()
            self._server = self._thread = None

    def __enter__(self) -> ScriptedService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        assert self._server is not None, "ScriptedService is not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def requests(self) -> list[str]:
        with self._lock:
            return list(self._log)

    def next_step(self, route: str) -> Step:
        """Records the request and takes the route's next step (the last one repeats)."""
        with self._lock:
            self._log.append(route)
            steps = self.script.get(route)
            if steps is None:
                return Reply(404, {"detail": "Not Found"})
            taken = self._taken.get(route, 0)
            self._taken[route] = taken + 1
            return steps[min(taken, len(steps) - 1)]


class _Handler(BaseHTTPRequestHandler):
    service: ScriptedService
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        """Stay quiet: tests read `ScriptedService.requests` instead."""

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        step = self.service.next_step(f"{self.command} {self.path}")
        if step == HANG:
            self.service.stopping.wait()
        if isinstance(step, str):  # DROP, or a HANG released by stop()
            self.close_connection = True
            return
        body = json.dumps(step.payload).encode()
        self.send_response(step.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
