"""A small HTTP client for the operator commands that talk to a running service (the gate,
model_status --base-url). The standard library is enough for a handful of JSON calls."""

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Answer:
    status: int
    body: str

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        return json.loads(self.body)


class Unreachable(Exception):
    """Nothing answered: connection refused, reset, or timed out."""


class ServiceClient:
    def __init__(self, base_url: str, *, token: str | None = None, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def get(self, path: str) -> Answer:
        return self._request("GET", path)

    def post(self, path: str) -> Answer:
        return self._request("POST", path)

    def _request(self, method: str, path: str) -> Answer:
        request = urllib.request.Request(self.base_url + path, method=method, data=None)
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return Answer(response.status, response.read().decode("utf-8", "replace"))
        except urllib.error.HTTPError as error:
            return Answer(error.code, error.read().decode("utf-8", "replace"))
        except (urllib.error.URLError, OSError) as error:
            raise Unreachable(str(getattr(error, "reason", error))) from None
