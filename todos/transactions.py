"""Whether MongoDB can run multi-document transactions: replica sets can, standalone servers not.

Asked once per process."""

import threading

from mongoengine.connection import get_db

_lock = threading.Lock()
_supported: bool | None = None


def transactions_supported() -> bool:
    global _supported
    if _supported is None:
        with _lock:
            if _supported is None:
                hello = get_db().command("hello")
                _supported = bool(hello.get("setName")) or hello.get("msg") == "isdbgrid"
    return _supported
