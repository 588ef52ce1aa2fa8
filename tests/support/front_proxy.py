"""The service behind its proxy (config/front_proxy.py) as the container runs it: nginx on the
test's port, gunicorn on another loopback port behind it, both started by the one process."""

import subprocess
import sys
import time

import requests

from tests.support.processes import ROOT, AppServer, free_port


class ProxiedApp(AppServer):
    """An AppServer whose process is `python -m config.front_proxy`: its URL is nginx's."""

    def __init__(self, env: dict[str, str], log_path) -> None:
        proxy = {"FRONT_PROXY": "1", "PROXY_UPSTREAM_PORT": str(free_port())}
        super().__init__({**proxy, **env}, log_path)

    def launch(self) -> "ProxiedApp":
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "config.front_proxy"],
                cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        return self

    def wait_ready(self, timeout: float = 60.0) -> "ProxiedApp":
        """Until /health answers 200 through the proxy (its 502 says gunicorn is not up)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if requests.get(self.url("/health"), timeout=2).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            if (
                self.process is None
                or self.process.poll() is not None
                or (time.monotonic() > deadline)
            ):
                self.stop()
                raise RuntimeError(f"not ready through the proxy; log:\n{self.log_tail()}")
            time.sleep(0.1)
