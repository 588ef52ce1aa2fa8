"""nginx in front of gunicorn, for a service facing clients it does not know.

A client trickling its headers or body holds a gunicorn thread before any credential is
checked. A few such clients hold them all. nginx reads each request whole, with deadlines,
first.

`python -m config.front_proxy [gunicorn options]` starts the web side: both when FRONT_PROXY
wants the proxy, else gunicorn alone. If either stops, the other is stopped. A plain `gunicorn
--config python:config.gunicorn` still serves alone (docs/operations.md)."""

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
# Beyond the longest a response may rightly take to start or go quiet, so the proxy never cuts off
# what the service would answer.
READ_MARGIN = 60
TOO_LARGE = "The request body is too large"
# Connections nginx holds at once; each proxied one takes two descriptors. A slow client holds one
# connection, not a gunicorn thread.
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
    """Any address but loopback; a unix socket or inherited descriptor reaches only this machine."""
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
    """FRONT_PROXY: `auto` (default) whenever BIND reaches beyond loopback; `1` always; `0`
    never."""
    choice = os.environ.get("FRONT_PROXY", "auto").strip().lower()
    if choice not in ("auto", "0", "1"):
        raise SystemExit(f"FRONT_PROXY must be auto, 1 or 0, got {choice!r}")
    if choice == "auto":
        return beyond_loopback(os.environ.get("BIND", "127.0.0.1:8000"))
    return choice == "1"


def render(settings: ProxySettings, work: Path) -> str:
    """nginx's whole configuration.

    Requests are read whole, with deadlines and MAX_BODY_BYTES, before gunicorn sees them.
    Responses are buffered unless the service says not to (event streams, /mcp). Forwarded
    headers pass only from TRUSTED_PROXIES; gunicorn trusts loopback, so the proxy decides.
    One nginx worker holds thousands of connections."""
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
    """The proxy's 413 in each path's own error shape, as an nginx map on the path."""
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
    """Runs both until either stops, then stops the other and exits with the first's status.

    A first exit of 0 becomes 1: the pair is down."""
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
