"""The proxy in front of gunicorn (config/front_proxy.py), real nginx each time: slow clients
hold none of gunicorn's threads, the proxy only proxies, and it passes on what it should."""

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from unittest import mock
from uuid import uuid4

import pytest
import requests
import yaml

from config.front_proxy import READ_MARGIN, ProxySettings, beyond_loopback, render, wanted
from scripts.embedded_mongo import EmbeddedMongo
from tests.support.commands import settings_of
from tests.support.front_proxy import ProxiedApp
from tests.support.local_hub import LocalHub
from tests.support.model_service import PULL_TIMEOUT, model_service_env, pull_until_ready
from tests.support.processes import ROOT, AppServer, alive, children, free_port, wait_for_http

THREADS = 4
ANSWER_WITHIN = 1.0


class SlowClients:
    """Connections that each send a request a piece at a time and never finish: `headers`
    of them trickle header lines, `bodies` of them a chunked todo body, a piece every
    `every` seconds, until the block ends."""

    def __init__(self, port: int, *, headers: int, bodies: int, every: float = 0.3) -> None:
        self.port, self.every = port, every
        self.plan = [b"X-Slow: 1\r\n"] * headers + [b"1\r\n \r\n"] * bodies
        self.sockets: list[socket.socket] = []
        self.stop = threading.Event()

    def __enter__(self) -> "SlowClients":
        for piece in self.plan:
            connection = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            if piece.startswith(b"X-"):
                connection.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            else:
                connection.sendall(
                    b"POST /todo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                    b"\r\nTransfer-Encoding: chunked\r\n\r\n"
                )
            self.sockets.append(connection)
        threading.Thread(target=self._trickle, daemon=True).start()
        time.sleep(1.0)  # each has been taken up by whoever reads it
        return self

    def _trickle(self) -> None:
        while not self.stop.wait(self.every):
            for connection, piece in zip(self.sockets, self.plan, strict=True):
                with suppress(OSError):  # closed by the server: it gave up on it
                    connection.sendall(piece)

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for connection in self.sockets:
            connection.close()


def answer_times(
    base_url: str, *, only: str | None = None, timeout: float = 5.0
) -> dict[str, float]:
    """How long /health, a todo list and a new todo (or the one named `only`) each take to
    answer (a timeout counts as its `timeout`), asked while the slow clients hold their
    connections."""
    times = {}
    for name, method, path, body in [
        ("health", "GET", "/health", None),
        ("todo list", "GET", "/todos", None),
        ("new todo", "POST", "/todo", {"todo": {"title": f"slow {uuid4().hex[:8]}"}}),
    ]:
        if only not in (None, name):
            continue
        started = time.monotonic()
        try:
            response = requests.request(method, base_url + path, json=body, timeout=timeout)
            assert response.status_code in (200, 201), response.text
        except requests.RequestException:
            pass
        times[name] = time.monotonic() - started
    return times


def app_env(mongo: EmbeddedMongo, tmp_path: Path) -> dict[str, str]:
    return {
        "MONGODB_URI": mongo.uri(),
        "DATA_DIR": str(tmp_path / "data"),
        "GUNICORN_THREADS": str(THREADS),
        "TODO_MAX_CONCURRENT": "2",
    }


@pytest.fixture(scope="module")
def proxied(
    mongo: EmbeddedMongo, hub_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProxiedApp]:
    """The pair as the container runs it, shared by the module: todos on the session's
    database, the tiny model pulled, THREADS gunicorn threads, 127.0.0.2 playing the
    platform's proxy. At the end SIGTERM stops both cleanly: the process exits 0."""
    work = tmp_path_factory.mktemp("proxied")
    env = {
        **model_service_env("", work / "share", work),
        **app_env(mongo, work),
        "TRUSTED_PROXIES": "127.0.0.2",
        "GEN_MAX_STEPS": "500",
        "GEN_SYNC_REFUSE_FACTOR": "0",
    }
    with LocalHub(hub_root) as hub:
        env["HF_ENDPOINT"] = hub.url
        app = ProxiedApp(env, work / "app.log").start()
        try:
            pull_until_ready(app, timeout=PULL_TIMEOUT["in-process"])
            yield app
            assert app.process is not None
            app.process.send_signal(signal.SIGTERM)
            assert app.process.wait(60) == 0, app.log_tail()  # both stopped cleanly: success
        finally:
            app.kill()


def test_slow_clients_hold_no_thread_behind_the_proxy(proxied: ProxiedApp):
    """(SIGTERM stopping the pair cleanly is checked as `proxied` ends.)"""
    with SlowClients(proxied.port, headers=THREADS + 1, bodies=THREADS + 1):
        for _ in range(3):
            times = answer_times(proxied.base_url)
            assert max(times.values()) < ANSWER_WITHIN, times
    assert requests.get(proxied.url("/health"), timeout=10).json()["status"] == "healthy"


def test_the_same_slow_clients_hold_every_thread_of_gunicorn_alone(proxied: ProxiedApp):
    """The check above is a real one: sent to the same gunicorn without the proxy (its
    loopback port behind nginx), these clients stall the service."""
    alone = f"http://127.0.0.1:{proxied.env['PROXY_UPSTREAM_PORT']}"
    upstream = int(proxied.env["PROXY_UPSTREAM_PORT"])
    wait = 2 * ANSWER_WITHIN
    with SlowClients(upstream, headers=THREADS, bodies=0):
        assert answer_times(alone, only="health", timeout=wait)["health"] > ANSWER_WITHIN
    with SlowClients(upstream, headers=0, bodies=THREADS):
        assert answer_times(alone, only="health", timeout=wait)["health"] > ANSWER_WITHIN
    assert requests.get(alone + "/health", timeout=10).status_code == 200  # free again


@pytest.mark.parametrize(
    ("bind", "beyond"),
    [
        ("0.0.0.0:8000", True),
        ("[::]:8000", True),
        ("10.1.2.3:8000", True),
        ("example.org:8000", True),
        ("127.0.0.1:8000", False),
        ("127.0.0.2:8000", False),
        ("[::1]:8000", False),
        ("localhost:8000", False),
        ("unix:/tmp/app.sock", False),
    ],
)
def test_the_proxy_is_wanted_whenever_the_service_binds_beyond_loopback(monkeypatch, bind, beyond):
    assert beyond_loopback(bind) is beyond
    monkeypatch.setenv("BIND", bind)
    monkeypatch.delenv("FRONT_PROXY", raising=False)
    assert wanted() is beyond
    for choice, chosen in (("1", True), ("0", False), ("auto", beyond)):
        monkeypatch.setenv("FRONT_PROXY", choice)
        assert wanted() is chosen


def test_the_proxy_only_proxies_and_keeps_the_services_limits(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("MAX_BODY_BYTES", "123456")
    monkeypatch.setenv("GEN_SYNC_TIMEOUT", "500")
    monkeypatch.setenv("EVENT_STREAM_SECONDS", "700")
    text = render(ProxySettings.from_env(), tmp_path)
    words = text.split()
    for static in ("root", "index", "alias", "autoindex", "try_files", "include"):
        assert static not in words, f"the proxy serves files: {static}"
    assert "client_max_body_size 123456;" in text
    assert f"proxy_read_timeout {700 + 60}s;" in text
    done = subprocess.run(
        ["nginx", "-e", "stderr", "-t", "-p", str(tmp_path), "-c", str(_written(text, tmp_path))],
        capture_output=True,
    )
    assert done.returncode == 0, done.stderr.decode()


def _written(text: str, folder: Path) -> Path:
    path = folder / "nginx.conf"
    path.write_text(text)
    return path


class Upstream(BaseHTTPRequestHandler):
    """What gunicorn would be, for what the proxy passes on: `/echo` answers the headers it
    got; `/events` and `/mcp/events` send one event, wait two seconds, then another
    (`/events` saying `X-Accel-Buffering: no`, as the service's streams do)."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path == "/echo":
            body = json.dumps(dict(self.headers.items())).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        if self.path == "/events":
            self.send_header("X-Accel-Buffering", "no")
        self.end_headers()
        self.wfile.write(b"data: first\n\n")
        self.wfile.flush()
        time.sleep(2)
        self.wfile.write(b"data: second\n\n")

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def nginx_before_upstream(tmp_path: Path, monkeypatch, **env: str) -> Iterator[str]:
    """The proxy's configuration for `env`, run by nginx in front of Upstream: its URL."""
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    port = free_port()
    for name, value in {"BIND": f"127.0.0.1:{port}", **env}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PROXY_UPSTREAM_PORT", str(upstream.server_address[1]))
    config = _written(render(ProxySettings.from_env(), tmp_path), tmp_path)
    nginx = subprocess.Popen(["nginx", "-e", "stderr", "-p", str(tmp_path), "-c", str(config)])
    try:
        wait_for_http(f"http://127.0.0.1:{port}/echo", 30, nginx)
        yield f"http://127.0.0.1:{port}"
    finally:
        nginx.send_signal(signal.SIGQUIT)
        nginx.wait(30)
        upstream.shutdown()


SENT = {
    "X-Forwarded-For": "203.0.113.7",
    "X-Forwarded-Proto": "https",
    "X-Forwarded-Host": "a.example",
}
# Read as the scheme by gunicorn (its secure_scheme_headers), which trusts the proxy on loopback.
SCHEME_HEADERS = {"X-Forwarded-Ssl": "on", "X-Forwarded-Protocol": "ssl"}


def test_forwarded_headers_from_a_trusted_proxy_pass_on(tmp_path: Path, monkeypatch):
    with nginx_before_upstream(tmp_path, monkeypatch, TRUSTED_PROXIES="127.0.0.1") as url:
        got = requests.get(url + "/echo", headers=SENT, timeout=10).json()
    assert got["X-Forwarded-Proto"] == "https"
    assert got["X-Forwarded-Host"] == "a.example"
    # The platform's list with the hop that reached the proxy: the service skips that hop,
    # a trusted one, and finds the client the platform named.
    assert got["X-Forwarded-For"] == "203.0.113.7, 127.0.0.1"
    assert got["Host"].startswith("127.0.0.1:")  # the client's Host, not the upstream's


def test_forwarded_headers_from_anyone_else_are_not_passed_on(tmp_path: Path, monkeypatch):
    with nginx_before_upstream(tmp_path, monkeypatch, TRUSTED_PROXIES="10.0.0.0/23") as url:
        got = requests.get(url + "/echo", headers={**SENT, **SCHEME_HEADERS}, timeout=10).json()
    assert got["X-Forwarded-For"] == "127.0.0.1"  # who really connected
    assert "X-Forwarded-Proto" not in got and "X-Forwarded-Host" not in got
    assert not set(SCHEME_HEADERS) & set(got)  # no client makes its own request "https"


@pytest.mark.parametrize("path", ["/events", "/mcp/events"])
def test_event_streams_and_mcp_pass_unbuffered(tmp_path: Path, monkeypatch, path: str):
    with nginx_before_upstream(tmp_path, monkeypatch) as url:
        started = time.monotonic()
        with requests.get(url + path, stream=True, timeout=10) as response:
            first = next(response.iter_lines())
            took = time.monotonic() - started
    assert first == b"data: first"
    assert took < 1.5  # the second event comes 2 s later: the first was not held for it


@pytest.mark.parametrize(
    ("path", "shape"),
    [
        ("/todo", {"data": None, "error": {"message": "The request body is too large"}}),
        ("/generate", {"error": {"message": "The request body is too large"}}),
        ("/v1/images/generations", {"error": {"message": "The request body is too large",
                                              "type": "invalid_request_error", "param": None,
                                              "code": None}}),
    ],
)  # fmt: skip
def test_a_body_past_max_body_bytes_is_a_413_in_the_services_shape(
    tmp_path: Path, monkeypatch, path: str, shape: dict
):
    with nginx_before_upstream(tmp_path, monkeypatch, MAX_BODY_BYTES="2048") as url:
        response = requests.post(url + path, data=b"x" * 4096, timeout=10)
        kept = requests.post(url + "/echo", data=b"x" * 2048, timeout=10)
    assert response.status_code == 413
    assert response.json() == shape
    assert kept.status_code == 501  # not the proxy's to refuse: Upstream has no POST


def test_the_container_starts_the_proxy_for_the_web_role_only():
    start = (ROOT / "scripts" / "start").read_text()
    assert "web) exec python -m config.front_proxy ;;" in start
    assert "worker) exec python manage.py run_worker ;;" in start


def test_serve_puts_the_proxy_in_front_beyond_loopback_and_either_stopping_stops_the_pair(
    mongo: EmbeddedMongo, tmp_path: Path
):
    """The container exits when either process exits: the platform restarts it whole.
    gunicorn stopping here; nginx dying in the image's own start (test_container_image.py
    test_the_image_command_serves_health_outside_docker_behind_its_proxy). (On loopback serve
    starts gunicorn alone: README's demo start checks that, tests/scripts/test_readme_demo.py.)"""
    bind, server, victim = "0.0.0.0", "nginx", "gunicorn"
    port = free_port()
    env = {
        **os.environ,
        "MONGODB_URI": mongo.uri(),
        "DATA_DIR": str(tmp_path / "data"),
        "BIND": f"{bind}:{port}",
        "PROXY_UPSTREAM_PORT": str(free_port()),
        "ACCESS_LOG": "0",
        "PRELOAD_MODEL_CODE": "0",
    }
    env.pop("FRONT_PROXY", None)
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "scripts/serve.py"], cwd=ROOT, env=env, stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            with suppress(requests.RequestException):
                health = requests.get(f"http://127.0.0.1:{port}/health", timeout=2)
                if health.status_code == 200:
                    break
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        assert health.headers["Server"] == server

        (proxy,) = [pid for pid, command in children(process.pid) if "front_proxy" in command]
        pair = children(proxy)
        target = next(pid for pid, command in pair if victim in command)
        os.kill(target, signal.SIGTERM)
        assert process.wait(60) != 0
        assert f"{victim} exited" in log.read_text(errors="replace")
        for pid, command in pair:
            assert not alive(pid), f"{command} left running"
    finally:
        if process.poll() is None:
            process.terminate()
        process.wait(60)


@pytest.mark.parametrize("template", ["containerapp.yaml", "containerapp-web.yaml"])
def test_the_azure_templates_send_their_ingress_and_probes_to_the_proxy(template: str):
    from tests.deploy.test_container_image import dockerfile_env

    spec = yaml.safe_load((ROOT / "deploy" / template).read_text())
    bind_port = int(dockerfile_env()["BIND"].rsplit(":", 1)[1])
    assert spec["properties"]["configuration"]["ingress"]["targetPort"] == bind_port
    container = spec["properties"]["template"]["containers"][0]
    assert {probe["httpGet"]["port"] for probe in container["probes"]} == {bind_port}
    assert {probe["httpGet"]["path"] for probe in container["probes"]} == {"/health"}
    names = {variable["name"] for variable in container["env"]}
    assert not names & {"BIND", "FRONT_PROXY"}  # the image's own: 0.0.0.0:8000, proxied


def send_from(app: AppServer, source: str, path: str, body: dict, **headers: str) -> tuple:
    """POSTs `body` as JSON from the loopback address `source`: (status, parsed answer)."""
    connection = http.client.HTTPConnection(
        "127.0.0.1", app.port, timeout=120, source_address=(source, 0)
    )
    try:
        connection.request(
            "POST", path, body=json.dumps(body),
            headers={"Content-Type": "application/json", **headers},
        )  # fmt: skip
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read() or b"null")
    finally:
        connection.close()


def test_the_service_behind_the_proxy_believes_what_a_trusted_proxy_forwarded(
    proxied: ProxiedApp,
):
    """The platform's proxy (a client on 127.0.0.2, named in TRUSTED_PROXIES) says the client
    came over https: nginx passes that on and the image link is https. Anyone else's say is
    not passed on."""
    body = {"prompt": "a link", "size": "64x64", "response_format": "url", "n": 1}
    links = {}
    for source in ("127.0.0.2", "127.0.0.1"):
        status, answer = send_from(
            proxied, source, "/v1/images/generations", body, **{"X-Forwarded-Proto": "https"}
        )
        assert status == 200, answer
        links[source] = answer["data"][0]["url"]
    assert links["127.0.0.2"].startswith("https://127.0.0.1:")
    assert links["127.0.0.1"].startswith("http://127.0.0.1:")


def test_clients_behind_the_proxy_stay_apart(proxied: ProxiedApp):
    """Who a client is comes through the proxy: another client's A1111 interrupt does not
    stop this one's generation (the service trusts the proxy on loopback and reads the
    address it forwards; without that, every client would be the proxy)."""
    long = {"prompt": "a long one behind the proxy", "steps": 400, "width": 64, "height": 64}
    answers: list[tuple] = []
    runner = threading.Thread(
        target=lambda: answers.append(send_from(proxied, "127.0.0.3", "/sdapi/v1/txt2img", long))
    )
    runner.start()
    try:
        deadline = time.monotonic() + 60
        while not any(
            job["state"] == "running" and job["parameters"]["prompt"] == long["prompt"]
            for job in requests.get(proxied.url("/jobs"), timeout=10).json()
        ):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert send_from(proxied, "127.0.0.4", "/sdapi/v1/interrupt", {})[0] == 200
        time.sleep(1.0)
        jobs = requests.get(proxied.url("/jobs"), timeout=10).json()
        mine = [job for job in jobs if job["parameters"]["prompt"] == long["prompt"]]
        assert mine and mine[0]["state"] == "running"  # another client's interrupt: not it
    finally:
        send_from(proxied, "127.0.0.3", "/sdapi/v1/interrupt", {})
        runner.join(120)
    assert answers and answers[0][0] == 200  # its own interrupt ended it, as A1111's does


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"BIND": "0.0.0.0:8001", "PROXY_UPSTREAM_PORT": "8001"}, "must differ from BIND's port"),
        ({"FRONT_PROXY": "maybe"}, "FRONT_PROXY must be auto, 1 or 0, got 'maybe'"),
        ({"TRUSTED_PROXIES": "10.0.0.0/8,ingress"}, "TRUSTED_PROXIES: 'ingress' is not an IP"),
    ],
)
def test_a_wrong_proxy_setting_stops_the_start_naming_it(monkeypatch, variables, message):
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit, match=re.escape(message)):
        wanted()
        ProxySettings.from_env()


def test_the_proxys_defaults_are_the_services_own():
    """The proxy reads GEN_SYNC_TIMEOUT, EVENT_STREAM_SECONDS and MAX_BODY_BYTES before
    Django's settings exist: with none set, its limits are the settings' defaults (the
    settings as a process started with that environment has them: settings_of)."""
    read = ("GEN_SYNC_TIMEOUT", "EVENT_STREAM_SECONDS", "MAX_BODY_BYTES")
    env = {k: v for k, v in os.environ.items() if k not in read}
    settings = settings_of(env)
    with mock.patch.dict(os.environ, env, clear=True):
        proxy = ProxySettings.from_env()
    longest = max(settings["GEN_SYNC_TIMEOUT"], settings["EVENT_STREAM_SECONDS"])
    assert proxy.max_body_bytes == settings["DATA_UPLOAD_MAX_MEMORY_SIZE"]
    assert proxy.read_timeout == int(longest) + READ_MARGIN
