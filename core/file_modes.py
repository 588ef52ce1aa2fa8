"""What the service writes is for its own user alone: prompts and pictures are private.

A mask of 077 makes files 0600 and folders 0700. An SMB share uses its mount options."""

import os

PRIVATE = 0o077


def keep_new_files_private() -> None:
    """Call before any file is made; child processes inherit the mask."""
    os.umask(PRIVATE)
