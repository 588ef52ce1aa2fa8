"""Runs gunicorn with the service, first starting the embedded database when MONGODB_URI is unset.

The embedded database keeps its data in DATA_DIR/mongo, so todos survive restarts, and is
stopped cleanly when the service stops (Ctrl-C or SIGTERM). Once the service answers, this says
where the page and the API docs are (the address gunicorn prints answers `GET /` with the todo
API's version, which is no place to start) and, with no model on the share yet, how to get one.

The address (BIND) is bound here before anything starts, so a port another process holds is
said at once, naming the setting that picks another, and the bound socket is handed to
gunicorn: the addresses printed are answered by this service's own process, never another's.

On a person's own machine (BIND on loopback) generations run at the machine's normal priority
(GEN_NICE=0): below it, an image waits behind every other busy program there. Beyond loopback
the service answers others, and the request-first default stands; GEN_NICE, when set, wins.

--demo is the offline demo in one command: a tiny random-weight model served from a local hub
(scripts/demo_hub.py) and the service pointed at it, nothing downloaded; the demo's model,
cache and images in a temporary folder removed when it stops.
"""

import argparse
import errno
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from config.front_proxy import wanted as front_proxy_wanted  # noqa: E402
from config.gunicorn import bind  # noqa: E402
from core.file_modes import keep_new_files_private  # noqa: E402
from scripts.embedded_mongo import EmbeddedMongo, EmbeddedMongoError  # noqa: E402
from scripts.running_service import write_record  # noqa: E402


def secret_key(data_dir: Path) -> str:
    """A key generated once per machine, so the embedded defaults need no configuration."""
    path = data_dir / "secret_key"
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


class DemoHubError(RuntimeError):
    pass


def demo_settings(hub_url: str, repo: str, work: Path) -> dict[str, str]:
    """The service on the demo hub's tiny model, its files in the demo's own folder (removed
    when it stops), so they never mix with a real model's share, cache or images."""
    return {
        "HF_ENDPOINT": hub_url,
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "MODEL_ID": repo,
        "MODEL_REVISION": "main",
        "MODEL_ADAPTERS": "",  # a real model's adapters do not fit the tiny one
        "MODEL_DIR": str(work / "models"),
        "DOWNLOAD_CACHE_DIR": str(work / "download-cache"),
        "OUTPUT_DIR": str(work / "images"),
    }


def start_demo_hub(work: Path) -> subprocess.Popen:
    """scripts/demo_hub.py, building its model in `work`.

    A process of its own, so this one never imports torch: stopping it is a signal, with no
    interpreter teardown to wait for. Its own session: it stops when this one says so."""
    return subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "demo_hub.py"), "--root", str(work / "hub")],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip


def demo_hub_address(hub: subprocess.Popen) -> tuple[str, str]:
    """The hub's address and repo, from the line it prints once it serves."""
    assert hub.stdout is not None
    for line in hub.stdout:
        served = re.search(r"HF_ENDPOINT=(\S+) MODEL_ID=(\S+)", line)
        if served:
            return served.group(1), served.group(2)
    hub.wait()
    raise DemoHubError(f"the demo hub exited ({hub.returncode}) before serving")


def stop_process(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
    process.wait()


def base_url(bind: str) -> str | None:
    """The address a browser on this machine opens for gunicorn's BIND; None for a socket."""
    address = host_and_port(bind)
    if address is None:
        return None
    host, port = address
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


class AddressTaken(RuntimeError):
    pass


def host_and_port(bind: str) -> tuple[str, int] | None:
    """BIND's host and port as gunicorn reads them; None for a Unix socket or a descriptor."""
    if bind.startswith(("unix:", "fd://")):
        return None
    match = re.fullmatch(r"(.*):(\d+)", bind)
    host, port = (match.group(1), int(match.group(2))) if match else (bind, 8000)
    return host.strip("[]"), port


def claim_address(bind: str) -> socket.socket | None:
    """A socket bound and listening on BIND (gunicorn's options: SO_REUSEADDR), for gunicorn
    to take over (fd://); None where BIND is a Unix socket or a descriptor, left to gunicorn."""
    address = host_and_port(bind)
    if address is None:
        return None
    host, port = address
    # As gunicorn binds it: IPv6 only for an IPv6 literal, so a name (localhost) is its IPv4
    # address, whatever order /etc/hosts lists its addresses in.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    dual = family == socket.AF_INET6 and socket.has_dualstack_ipv6()  # as gunicorn's [::]
    try:
        return socket.create_server(
            (host or "0.0.0.0", port), family=family, backlog=2048, dualstack_ipv6=dual
        )
    except OSError as exc:
        taken = "is taken by another process" if exc.errno == errno.EADDRINUSE else f"failed: {exc}"
        raise AddressTaken(
            f"{bind} {taken}; set BIND to listen elsewhere, "
            f"e.g. BIND=127.0.0.1:{port + 1} ./scripts/serve"
        ) from None


def on_loopback(bind: str) -> bool:
    """Whether only this machine reaches BIND (a Unix socket: a proxy's, serving others)."""
    address = host_and_port(bind)
    if address is None:
        return False
    host = address[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: its addresses may be anyone's
        return False


def generation_priority(env: dict[str, str], bind: str) -> tuple[str | None, str]:
    """GEN_NICE for the service (None: its own default) and the start line that says why."""
    if env.get("GEN_NICE"):
        return env["GEN_NICE"], f"serve: generation priority: GEN_NICE={env['GEN_NICE']}, as set"
    if on_loopback(bind):
        return "0", (
            "serve: generation priority: GEN_NICE=0, the machine's normal one (BIND is on "
            "loopback: one person's machine, where a lower one makes images wait for every "
            "busy program; GEN_NICE=10 puts requests first)"
        )
    return None, (
        "serve: generation priority: GEN_NICE=10, below request threads (BIND is beyond "
        "loopback: others' requests get a core first; GEN_NICE=0 for the normal priority)"
    )


def next_steps(url: str, status: dict[str, Any] | None, *, demo: bool) -> list[str]:
    """Where things are and, with no model on the share, what to do next."""
    lines = [f"serve: the page: {url}/ui/", f"serve: the API docs: {url}/api/docs"]
    if status is not None and not status.get("weights_on_share", True):
        size = "the demo's tiny model, from its local hub" if demo else "the default is about 7 GB"
        lines.append(
            f"serve: no model yet: press Pull on the page, or POST /model/pull "
            f"(curl -X POST {url}/model/pull), to fetch {status.get('model_id')} ({size})"
        )
    return lines


def announce_when_answering(url: str, server: subprocess.Popen, *, demo: bool) -> None:
    """Prints next_steps once the service answers; nothing if it stops first."""
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy
    while server.poll() is None:
        try:
            with direct.open(f"{url}/model/status", timeout=5) as response:
                status = json.load(response)
        except urllib.error.HTTPError:
            status = None  # it answers; the page tells what it says of the model
        except (OSError, ValueError):  # not listening yet
            time.sleep(0.2)
            continue
        print("\n".join(next_steps(url, status, demo=demo)), flush=True)
        return


def main(argv: list[str] | None = None) -> int:
    keep_new_files_private()  # DATA_DIR, its key and the embedded database: this user's alone
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        epilog=f"BIND picks the address (now {bind}; default 127.0.0.1:8000), e.g. "
        "BIND=127.0.0.1:8001 ./scripts/serve; every setting: docs/configuration.md",
    )
    parser.add_argument(
        "--demo",
        action="store_true",
        help="serve a tiny demo model from a local hub: the image API offline, no download",
    )
    args = parser.parse_args(argv)
    data_dir = Path(os.environ.get("DATA_DIR", ROOT / ".data"))
    env = dict(os.environ)
    env.setdefault("SECRET_KEY", secret_key(data_dir))
    try:  # before anything starts: a taken port stops nothing half-started
        listener = claim_address(bind)
    except AddressTaken as exc:
        print(f"serve: {exc}", file=sys.stderr)
        return 1
    nice, priority_line = generation_priority(env, bind)
    if nice is not None:
        env["GEN_NICE"] = nice

    server: subprocess.Popen | None = None
    hub: subprocess.Popen | None = None
    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        if server is not None:
            server.send_signal(signum)
        elif hub is not None:  # still building: no need to finish
            hub.terminate()

    # Installed before anything starts, so a stop during start-up still cleans up.
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    with ExitStack() as started:
        if listener is not None:
            started.callback(listener.close)  # a stop before gunicorn starts frees the port
        if args.demo:
            work = Path(tempfile.mkdtemp(prefix="imagegen-demo-"))
            started.callback(shutil.rmtree, work, ignore_errors=True)
            print("serve: --demo: building a tiny random-weight model and a local hub", flush=True)
            hub = start_demo_hub(work)
            started.callback(stop_process, hub)
            try:
                hub_url, repo = demo_hub_address(hub)
            except DemoHubError as exc:
                if stopping:
                    return 0
                print(f"serve: {exc}", file=sys.stderr)
                return 1
            env.update(demo_settings(hub_url, repo, work))
            print(f"serve: demo hub at {hub_url} serving {repo}; its files in {work}")
        if not env.get("MONGODB_URI") and not stopping:
            port = int(env.get("EMBEDDED_DB_PORT", "27117"))
            database = EmbeddedMongo(data_dir / "mongo", port=port)
            started.callback(database.stop)
            try:
                database.start()
            except EmbeddedMongoError as exc:
                print(f"serve: {exc}", file=sys.stderr)
                return 1
            env["MONGODB_URI"] = database.uri()
            print(f"serve: embedded database on port {port}, data in {database.data_dir}")
        if stopping:
            return 0
        url = base_url(bind)
        # For ./scripts/manage: the database and settings this service runs with.
        started.callback(write_record(data_dir, env, url).unlink, missing_ok=True)
        print(priority_line, flush=True)
        if listener is not None and front_proxy_wanted():
            listener.close()  # nginx binds BIND itself, gunicorn behind it on loopback
            listener = None
        handed = [] if listener is None else ["--bind", f"fd://{listener.fileno()}"]
        server = subprocess.Popen(
            [sys.executable, "-m", "config.front_proxy", *handed],  # behind nginx beyond loopback
            cwd=ROOT, env=env, pass_fds=() if listener is None else (listener.fileno(),),
        )  # fmt: skip
        if listener is not None:
            listener.close()  # gunicorn holds it now: only its process answers there
        if url is not None:
            announce_when_answering(url, server, demo=args.demo)
        return server.wait()


if __name__ == "__main__":
    sys.exit(main())
