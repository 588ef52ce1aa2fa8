"""Makes sure the todo indexes exist before the first write of this process.

Title uniqueness depends on the unique index, so a write never runs before it exists;
a failure (database down) is retried by the next write.
"""

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
