"""A webhook receiver as a process of its own: an HTTP server that verifies each delivery
with the `standardwebhooks` package, as a receiver in the field would, answers 204 to a good
one and 401 to a bad one, and appends each to a JSON-lines file the test reads; with DELAY,
it takes that many seconds to answer (a slow receiver).

Run: python -m tests.support.webhook_receiver PORT SECRET FILE [DELAY]"""

import json
import socket
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from tests.support.processes import ROOT, wait_for_http


def serve(port: int, secret: str, out: Path, delay: float = 0.0) -> None:
    webhook = Webhook(secret)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            headers = {name.lower(): value for name, value in self.headers.items()}
            try:
                webhook.verify(body, headers)
                verified = True
            except WebhookVerificationError:
                verified = False
            line = {"verified": verified, "headers": headers, "body": body.decode()}
            with out.open("a") as f:
                f.write(json.dumps(line) + "\n")
            time.sleep(delay)
            self.send_response(204 if verified else 401)
            self.end_headers()

        def do_GET(self) -> None:  # readiness
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def _held_port(port: int = 0) -> socket.socket:
    """A loopback port bound but not listening: a connection to it is refused, and no other
    process (another test's server on this shared machine) can take it meanwhile."""
    held = socket.socket()
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    held.bind(("127.0.0.1", port))
    return held


class Receiver:
    """The receiver process on a port of its own, held while it is down; started and stopped
    as the test says."""

    def __init__(self, secret: str, out: Path, *, delay: float = 0.0) -> None:
        self._held: socket.socket | None = _held_port()
        self.port = self._held.getsockname()[1]
        self.secret, self.out, self.delay = secret, out, delay
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.process: subprocess.Popen | None = None

    def start(self) -> "Receiver":
        if self._held is not None:
            self._held.close()  # the receiver binds it at once
            self._held = None
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.webhook_receiver", str(self.port),
             self.secret, str(self.out), str(self.delay)], cwd=ROOT,
        )  # fmt: skip
        wait_for_http(f"http://127.0.0.1:{self.port}/", 20, self.process)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)

    def close(self) -> None:
        self.stop()
        if self._held is not None:
            self._held.close()

    def deliveries(self) -> list[dict]:
        if not self.out.exists():
            return []
        return [json.loads(line) for line in self.out.read_text().splitlines()]

    def events(self) -> list[dict]:
        """The verified deliveries' bodies, parsed, each once (a repeat has the same id)."""
        seen, found = set(), []
        for delivery in self.deliveries():
            if delivery["verified"] and delivery["headers"]["webhook-id"] not in seen:
                seen.add(delivery["headers"]["webhook-id"])
                found.append(json.loads(delivery["body"]))
        return found

    def wait_for(self, count: int, timeout: float) -> list[dict]:
        deadline = time.monotonic() + timeout
        while len(found := self.events()) < count:
            assert time.monotonic() < deadline, f"{len(found)} of {count}: {self.deliveries()}"
            time.sleep(0.1)
        return found


if __name__ == "__main__":
    serve(int(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), float(sys.argv[4]))
