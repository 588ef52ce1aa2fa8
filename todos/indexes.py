"""Makes sure the todo indexes exist before the first write of this process.

Title uniqueness depends on the unique index, so a write never runs before it exists. After
the first success a write pays one flag check and no round trip; a failure (database down)
leaves the flag unset, so the next write tries again.
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
