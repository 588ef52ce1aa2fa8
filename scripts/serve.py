"""Runs gunicorn with the service, first starting the embedded database when MONGODB_URI is unset.

The embedded database keeps its data in DATA_DIR/mongo, so todos survive restarts, and is
stopped cleanly when the service stops (Ctrl-C or SIGTERM).
"""

import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.embedded_mongo import EmbeddedMongo, EmbeddedMongoError  # noqa: E402


def secret_key(data_dir: Path) -> str:
    """A key generated once per machine, so the embedded defaults need no configuration."""
    path = data_dir / "secret_key"
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


def main() -> int:
    data_dir = Path(os.environ.get("DATA_DIR", ROOT / ".data"))
    env = dict(os.environ)
    env.setdefault("SECRET_KEY", secret_key(data_dir))

    database = None
    server: subprocess.Popen | None = None
    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        if server is not None:
            server.send_signal(signum)

    # Installed before anything starts, so a stop during start-up still cleans up.
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        if not env.get("MONGODB_URI"):
            port = int(env.get("EMBEDDED_DB_PORT", "27117"))
            database = EmbeddedMongo(data_dir / "mongo", port=port)
            try:
                database.start()
            except EmbeddedMongoError as exc:
                print(f"serve: {exc}", file=sys.stderr)
                return 1
            env["MONGODB_URI"] = database.uri()
            print(f"serve: embedded database on port {port}, data in {database.data_dir}")
        if stopping:
            return 0
        server = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "--config", "python:config.gunicorn"],
            cwd=ROOT, env=env,
        )  # fmt: skip
        return server.wait()
    finally:
        if database is not None:
            database.stop()


if __name__ == "__main__":
    sys.exit(main())
