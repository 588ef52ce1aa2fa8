"""What a running ./scripts/serve chose for its service, for commands run beside it.

The service's database (the embedded one's address) and settings live in serve's own process,
so a management command started later in another terminal would see none of them: it would
look for MongoDB on its default port and read API_KEYS from its own environment. serve writes
them to DATA_DIR/serve.json (0600: a MONGODB_URI may hold a password) while it runs, and
scripts/manage.py takes them as defaults under its own environment.
"""

import json
import os
from pathlib import Path

# Settings serve may choose for the service that a command beside it must share; API_KEYS
# says whether the service takes named keys.
SHARED = (
    "MONGODB_URI",
    "API_KEYS",
    "GEN_NICE",
    "HF_ENDPOINT",
    "MODEL_ID",
    "MODEL_REVISION",
    "MODEL_ADAPTERS",
    "MODEL_DIR",
    "DOWNLOAD_CACHE_DIR",
    "OUTPUT_DIR",
)


def record_path(data_dir: Path) -> Path:
    return data_dir / "serve.json"


def write_record(data_dir: Path, env: dict[str, str], url: str | None) -> Path:
    """Records this process (serve) as the service on data_dir, with the shared settings."""
    path = record_path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    settings = {name: env[name] for name in SHARED if name in env}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"pid": os.getpid(), "url": url, "settings": settings}, out)
    return path


def running_service(data_dir: Path) -> dict | None:
    """serve's record on data_dir while that serve runs; None when none does (a record left by
    a serve that was killed names a process that is gone, or another program's)."""
    try:
        record = json.loads(record_path(data_dir).read_text())
        cmdline = Path(f"/proc/{int(record['pid'])}/cmdline").read_bytes()
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return record if b"serve.py" in cmdline else None
