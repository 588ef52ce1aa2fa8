"""Files that appear whole or not at all, on local disk and on the SMB share alike.

Every file the service writes for others to read (a model file placed on the share, the
share's manifest, a generated PNG and its record) is written under a hidden temporary name
beside its target, flushed to disk, and renamed over the target. A reader never sees half a
file, and a crash leaves at most a `*.partial` file that no listing counts (the share's
clean-up removes old ones). The flush comes before the rename so that the name never points
at data the disk does not yet hold: the manifest, written last, must not outlive its files.
Nothing here takes a lock: SMB has none.
"""

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

PARTIAL_SUFFIX = ".partial"


def is_partial(path: Path) -> bool:
    return path.name.endswith(PARTIAL_SUFFIX)


@contextmanager
def _replacing(target: Path) -> Iterator[Path]:
    """Yields a temporary path beside `target`; once the body has written it, it is flushed
    and renamed onto `target`. On any failure the temporary file goes and `target` stays."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}{PARTIAL_SUFFIX}")
    try:
        yield temporary
        with temporary.open("rb+") as f:
            os.fsync(f.fileno())
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


def write_atomically(target: Path, data: bytes) -> None:
    with _replacing(target) as temporary:
        temporary.write_bytes(data)


def copy_atomically(
    source: Path, target: Path, *, verify: Callable[[Path], None] | None = None
) -> None:
    """`verify` sees the copy before it takes the target's name, and may refuse it by
    raising: the target is then left as it was."""
    with _replacing(target) as temporary:
        # copyfile: the kernel copies (sendfile), with no buffer in this process; a Python
        # loop over 16 MiB chunks took twice as long (docs/performance.md).
        shutil.copyfile(source, temporary)
        if verify is not None:
            verify(temporary)
