"""Runs a manage.py command against the service ./scripts/serve started (scripts/manage).

Run by hand, `manage.py keys create alice` would look for MongoDB on its default port while
the service's embedded database is elsewhere, and read API_KEYS from its own environment, not
the service's. Here a command gets what the running serve recorded on DATA_DIR (its database,
API_KEYS, the demo's model) as defaults under its own environment: what it sets still wins.
With no serve running on DATA_DIR and MONGODB_URI unset, the embedded database on DATA_DIR is
started for the command alone (keys made before the first start are there for it). Lines of
its own go to stderr: stdout is the command's (a key's secret, alone).
"""

import os
import signal
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.env import parse_bool  # noqa: E402
from core.file_modes import keep_new_files_private  # noqa: E402
from scripts.embedded_mongo import EmbeddedMongo, EmbeddedMongoError  # noqa: E402
from scripts.running_service import running_service  # noqa: E402


def say(line: str) -> None:
    print(f"manage: {line}", file=sys.stderr, flush=True)


def stop_on_signal(number: int, _frame: object) -> None:
    """A terminal closed or a supervisor's stop ends the command through its exit path, which
    stops the database started for it (in its own session, no signal reaches it)."""
    sys.exit(128 + number)


def main(argv: list[str]) -> int:
    keep_new_files_private()  # the embedded database it may start: this user's alone
    for number in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, stop_on_signal)
    data_dir = ROOT / os.environ.get("DATA_DIR", ".data")  # relative: to the project, as serve
    env = dict(os.environ)
    if "DATA_DIR" in env:  # the same folder from any working directory
        env["DATA_DIR"] = str(data_dir)
    with ExitStack() as started:
        service = running_service(data_dir)
        if service is not None:
            for name, value in service["settings"].items():
                env.setdefault(name, value)
            keys = "on" if parse_bool(env.get("API_KEYS", "0")) else "off"
            say(
                f"with the service ./scripts/serve runs (pid {service['pid']}, "
                f"{service['url'] or 'its socket'}; API_KEYS {keys})"
            )
        elif not env.get("MONGODB_URI"):
            port = int(env.get("EMBEDDED_DB_PORT", "27117"))
            database = EmbeddedMongo(data_dir / "mongo", port=port)
            started.callback(database.stop)
            try:
                database.start()
            except EmbeddedMongoError as exc:
                say(str(exc))
                return 1
            env["MONGODB_URI"] = database.uri()
            say(
                f"no ./scripts/serve runs on {data_dir}: its embedded database started for "
                f"this command (port {port})"
            )
        return subprocess.run([sys.executable, str(ROOT / "manage.py"), *argv], env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
