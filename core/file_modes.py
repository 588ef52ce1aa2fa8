"""What the service writes (the model on the share, generated images and their records, edits'
inputs, the download cache, the embedded database under DATA_DIR) is readable by its own user
alone: prompts and pictures are private, and another account on the machine has no business
with them. A process mask of 077 makes every new file 0600 and every new folder 0700, wherever
the file system keeps modes; an SMB share takes them from its mount options instead
(docs/azure.md)."""

import os

PRIVATE = 0o077


def keep_new_files_private() -> None:
    """At the start of every process that writes (gunicorn's worker, manage.py), before any
    file is made; the processes it starts inherit the mask."""
    os.umask(PRIVATE)
