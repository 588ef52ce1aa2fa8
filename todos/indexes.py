"""Makes sure the todo indexes exist before this process's first write.

Title uniqueness depends on them. A failure leaves the flag unset, so the next write tries
again."""

import threading

from todos.documents import Todo

_lock = threading.Lock()
_ensured = False


def ensure_todo_indexes() -> None:
    global _ensured
    if _ensured:
        return
    with _lock:
        if not _ensured:
            Todo.ensure_indexes()
            _ensured = True
