#!/usr/bin/env python
"""Django's command-line utility: runs the operator commands
(pull_model, model_status, gate, generate, run_worker: docs/operations.md)."""

import os
import secrets
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    # The operator commands sign nothing, so they run without a configured key; the service
    # (config/wsgi.py under gunicorn) still refuses to start without one.
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    # Before any thread starts: generate (and run_worker's jobs) must not fault their memory
    # in anew from a thread's own arena (imagegen/model/malloc_arena.py).
    from imagegen.model.malloc_arena import use_one_arena

    use_one_arena()
    from core.file_modes import keep_new_files_private

    keep_new_files_private()  # files 0600, folders 0700 (core/file_modes.py)
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
