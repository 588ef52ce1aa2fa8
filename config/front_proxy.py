"""nginx in front of gunicorn, for a service that faces clients it does not know.

gunicorn's threads each read a whole request before the application sees it, so a client that
trickles its headers or a chunked body holds a thread for as long as it likes, before any
credential is checked: a few such clients hold them all. nginx reads every request whole, with
deadlines, before it hands it on, so gunicorn's threads only ever meet complete requests.

`python -m config.front_proxy [gunicorn options]` is how the container and ./scripts/serve
start the web side. When FRONT_PROXY wants the proxy (by default whenever BIND reaches beyond
loopback) it runs both: nginx on BIND, gunicorn on 127.0.0.1:PROXY_UPSTREAM_PORT, and stops
when either stops, stopping the other; otherwise it is gunicorn alone. The proxy only proxies
(no document root, no page of its own). A plain `gunicorn --config python:config.gunicorn`
still serves the application alone.
"""

import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from core.env import env_float, env_int, env_list, env_str
from imagegen.api.errors import openai_error

GUNICORN = [sys.executable, "-m", "gunicorn", "--config", "python:config.gunicorn"]
# Beyond the longest a response may rightly take to start or to go quiet (a synchronous
# generation's GEN_SYNC_TIMEOUT, an event stream's EVENT_STREAM_SECONDS): the proxy never
# cuts off what the service would still answer.
READ_MARGIN = 60
TOO_LARGE = "The request body is too large"
# Connections nginx holds at once (each proxied one takes two descriptors, hence the limit on
# open files); a slow client holds one, not a gunicorn thread.
WORKER_CONNECTIONS = 8192


@dataclass(frozen=True)
class ProxySettings:
    listen: str  # host:port nginx listens on (BIND)
    upstream_port: int  # gunicorn's port on loopback
    max_body_bytes: int
    header_timeout: int
    body_timeout: int
    read_timeout: int
    trusted_proxies: tuple[str, ...]

    @classmethod
    def from_env(cls) -> "ProxySettings":
        longest = max(
            env_int("GEN_SYNC_TIMEOUT", 230, minimum=1),
            env_float("EVENT_STREAM_SECONDS", 220.0, minimum=0.1),
        )
        listen = env_str("BIND", "127.0.0.1:8000")
        upstream = env_int("PROXY_UPSTREAM_PORT", 8001, minimum=1)
        if port_of(listen) == upstream:
            raise SystemExit(f"PROXY_UPSTREAM_PORT ({upstream}) must differ from BIND's port")
        trusted = tuple(env_list("TRUSTED_PROXIES", []))
        for network in trusted:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise SystemExit(
                    f"TRUSTED_PROXIES: {network!r} is not an IP address or network (CIDR)"
                ) from None
        return cls(
            listen=listen,
            upstream_port=upstream,
            max_body_bytes=env_int("MAX_BODY_BYTES", 16 * 1024 * 1024, minimum=1024),
            header_timeout=env_int("PROXY_HEADER_TIMEOUT", 10, minimum=1),
            body_timeout=env_int("PROXY_BODY_TIMEOUT", 30, minimum=1),
            read_timeout=int(longest) + READ_MARGIN,
            trusted_proxies=trusted,
        )


def port_of(bind: str) -> int:
    match = re.fullmatch(r".*:(\d+)", bind)
    return int(match.group(1)) if match else 8000


def beyond_loopback(bind: str) -> bool:
    """Whether gunicorn's BIND takes connections from other machines: any address but a
    loopback one (a unix socket or an inherited descriptor reaches only this machine)."""
    if bind.startswith(("unix:", "fd://")):
        return False
    host = re.sub(r":\d+$", "", bind).strip("[]")
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True  # a host name: whatever it resolves to may be reachable


def wanted() -> bool:
    """FRONT_PROXY: `auto` (default) puts the proxy in front whenever BIND reaches beyond
    loopback; `1` always; `0` never."""
    choice = os.environ.get("FRONT_PROXY", "auto").strip().lower()
    if choice not in ("auto", "0", "1"):
        raise SystemExit(f"FRONT_PROXY must be auto, 1 or 0, got {choice!r}")
    if choice == "auto":
        return beyond_loopback(os.environ.get("BIND", "127.0.0.1:8000"))
    return choice == "1"


def render(settings: ProxySettings, work: Path) -> str:
    """nginx's whole configuration. Requests are read whole (headers within
    PROXY_HEADER_TIMEOUT, the body with at most PROXY_BODY_TIMEOUT between two reads, at most
    MAX_BODY_BYTES) before gunicorn sees them; responses are buffered, so a slow reader does
    not hold a thread either, except where the service says not to (`X-Accel-Buffering: no`,
    as its event streams do) and under /mcp. Forwarded headers are passed on from
    TRUSTED_PROXIES only; from anyone else X-Forwarded-For is replaced by the peer's address
    and X-Forwarded-Proto and -Host are dropped (gunicorn is told to trust loopback, so the
    proxy decides what it believes). X-Forwarded-Ssl and -Protocol, which gunicorn also reads
    as the scheme, are dropped from everyone. One worker holds thousands of connections, so
    it takes far more slow clients than there are threads to fill it."""
    trusted = "".join(f"        {network} 1;\n" for network in settings.trusted_proxies)
    proxied = f"""            proxy_pass http://application;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $forwarded_for;
            proxy_set_header X-Forwarded-Proto $forwarded_proto;
            proxy_set_header X-Forwarded-Host $forwarded_host;
            proxy_set_header X-Forwarded-Ssl "";
            proxy_set_header X-Forwarded-Protocol "";
            proxy_connect_timeout 5s;
            proxy_send_timeout 60s;
            proxy_read_timeout {settings.read_timeout}s;
            proxy_redirect off;
"""
    return f"""# Written by config/front_proxy.py at each start; edits are lost.
daemon off;
worker_processes 1;
pid {work}/nginx.pid;
error_log stderr warn;
worker_rlimit_nofile {2 * WORKER_CONNECTIONS};

events {{
    worker_connections {WORKER_CONNECTIONS};
}}

http {{
    access_log off;
    server_tokens off;
    client_body_temp_path {work}/body;
    proxy_temp_path {work}/proxy;
    fastcgi_temp_path {work}/fastcgi;
    uwsgi_temp_path {work}/uwsgi;
    scgi_temp_path {work}/scgi;

    client_header_timeout {settings.header_timeout}s;
    client_body_timeout {settings.body_timeout}s;
    send_timeout 60s;
    keepalive_timeout 65s;
    client_max_body_size {settings.max_body_bytes};
    client_body_buffer_size 1m;
    proxy_request_buffering on;
    proxy_buffering on;

    geo $from_trusted_proxy {{
        default 0;
{trusted}    }}
    map $from_trusted_proxy $forwarded_for {{
        1 $proxy_add_x_forwarded_for;
        default $remote_addr;
    }}
    map $from_trusted_proxy $forwarded_proto {{
        1 $http_x_forwarded_proto;
        default "";
    }}
    map $from_trusted_proxy $forwarded_host {{
        1 $http_x_forwarded_host;
        default "";
    }}

{too_large_bodies()}
    # Idle connections to gunicorn are closed here before gunicorn closes them (its keepalive
    # is 5 s), so a request is never sent down a connection gunicorn is closing.
    upstream application {{
        server 127.0.0.1:{settings.upstream_port};
        keepalive 8;
        keepalive_timeout 4s;
    }}

    server {{
        listen {settings.listen} default_server;
        server_name _;

        location / {{
{proxied}        }}
        location /mcp {{
{proxied}            proxy_buffering off;
        }}
        error_page 413 = @too_large;
        location @too_large {{
            default_type application/json;
            return 413 $too_large_body;
        }}
    }}
}}
"""


def too_large_bodies() -> str:
    """The proxy's 413 in the service's own shape for each path (core/errors.py): the todo
    envelope, OpenAI's error, the image service's error; as an nginx map on the path."""
    todo = json.dumps({"data": None, "error": {"message": TOO_LARGE}})
    openai = json.dumps({"error": openai_error(413, TOO_LARGE, None)})
    image = json.dumps({"error": {"message": TOO_LARGE}})
    return f"""    map $uri $too_large_body {{
        ~^/(todos?(/.*)?)?$ '{todo}';
        ~^/v1/ '{openai}';
        default '{image}';
    }}
"""


def _stop(process: subprocess.Popen, signum: int) -> None:
    if process.poll() is None:
        process.send_signal(signum)


def run(gunicorn_args: list[str]) -> int:
    """nginx and gunicorn until either stops; then the other is stopped too, and this exits
    with the first one's status (1 when it stopped on its own with 0: the pair is down)."""
    settings = ProxySettings.from_env()
    work = Path(tempfile.mkdtemp(prefix="imagegen-proxy-"))
    work.chmod(0o711)  # nginx's workers may run as another user when started by root
    config = work / "nginx.conf"
    config.write_text(render(settings, work))
    nginx_binary = shutil.which("nginx") or "/usr/sbin/nginx"
    upstream_env = {
        **os.environ,
        "BIND": f"127.0.0.1:{settings.upstream_port}",
        "TRUSTED_PROXIES": ",".join(["127.0.0.1", *settings.trusted_proxies]),
    }
    gunicorn = subprocess.Popen([*GUNICORN, *gunicorn_args], env=upstream_env)
    nginx = subprocess.Popen([nginx_binary, "-e", "stderr", "-p", str(work), "-c", str(config)])
    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        _stop(nginx, signal.SIGQUIT)  # nginx's graceful stop
        _stop(gunicorn, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        while (first := _exited(gunicorn, nginx)) is None:
            time.sleep(0.2)
        name, code = first
        if not stopping:
            print(f"front_proxy: {name} exited ({code}); stopping the other", file=sys.stderr)
        _stop(nginx, signal.SIGQUIT)
        _stop(gunicorn, signal.SIGTERM)
        for process in (nginx, gunicorn):
            try:
                process.wait(40)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        return code if code or stopping else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _exited(gunicorn: subprocess.Popen, nginx: subprocess.Popen) -> tuple[str, int] | None:
    for name, process in (("gunicorn", gunicorn), ("nginx", nginx)):
        if (code := process.poll()) is not None:
            return name, code
    return None


def main(gunicorn_args: list[str]) -> int:
    """The pair when FRONT_PROXY wants the proxy; else gunicorn alone, in this process."""
    if not wanted():
        os.execv(sys.executable, [*GUNICORN, *gunicorn_args])
    return run(gunicorn_args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
