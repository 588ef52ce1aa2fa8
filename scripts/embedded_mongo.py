"""A local SecantusDB (MongoDB wire protocol) server process, for the embedded default and tests.

Only the launcher and the tests start it; the service itself just reads MONGODB_URI, so a real
MongoDB works unchanged.
"""

import subprocess
import sys
import time
from pathlib import Path

from pymongo import MongoClient
from pymongo.errors import PyMongoError


class EmbeddedMongoError(RuntimeError):
    pass


class EmbeddedMongo:
    def __init__(
        self, data_dir: Path, *, port: int, host: str = "127.0.0.1", standalone: bool = False
    ) -> None:
        """standalone: advertise a standalone server (no transactions), as a plain mongod
        does, instead of SecantusDB's default single-node replica set."""
        self.data_dir = Path(data_dir)
        self.standalone = standalone
        self.host = host
        self.port = port
        self.process: subprocess.Popen | None = None
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.log"

    def uri(self, database: str = "todos") -> str:
        # retryWrites=false: SecantusDB's writes slow down over time with retryable writes.
        return f"mongodb://{self.host}:{self.port}/{database}?retryWrites=false"

    def start(self, timeout: float = 60.0) -> "EmbeddedMongo":
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "secantus", "--host", self.host, "--port", str(self.port),
             "--storage-path", str(self.data_dir), "--log-level", "WARNING",
             *(["--standalone"] if self.standalone else [])],
            stdout=log, stderr=subprocess.STDOUT,
            # Its own session: a Ctrl-C in the terminal reaches the launcher, which stops the
            # database after the service, not the database first.
            start_new_session=True,
        )  # fmt: skip
        log.close()
        self._wait_until_answering(timeout)
        return self

    def _wait_until_answering(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        client = MongoClient(self.host, self.port, serverSelectionTimeoutMS=500)
        try:
            while True:
                if self.process.poll() is not None:
                    raise EmbeddedMongoError(
                        f"the database server exited with code {self.process.returncode}; "
                        f"see {self.log_path} (is port {self.port} or {self.data_dir} in use?)"
                    )
                try:
                    client.admin.command("ping")
                    return
                except PyMongoError:
                    if time.monotonic() > deadline:
                        self.stop()
                        raise EmbeddedMongoError(
                            f"the database server did not answer within {timeout:.0f}s; "
                            f"see {self.log_path}"
                        ) from None
                    time.sleep(0.2)
        finally:
            client.close()

    def stop(self, timeout: float = 30.0) -> int | None:
        """Stops the server cleanly (SIGTERM lets WiredTiger close its files)."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.terminate()
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def __enter__(self) -> "EmbeddedMongo":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
