"""Runs manage.py commands the way an operator does: as real processes (manage), or in this
process through call_command, seeing what the real process would show (run_command).

A real process costs a Python start and the imports of Django, huggingface_hub and, for
`generate`, torch and diffusers: seconds each. run_command gives the command the settings a
process started with its environment would have, the process-wide objects those settings
build (imagegen.backend's), the exit code and stdout and stderr (its log lines and warnings
included) that manage.py would give, so a test asserts the same things of either.
"""

import contextlib
import io
import logging
import os
import runpy
import subprocess
import sys
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from unittest import mock

from tests.support.processes import ROOT

SETTINGS_FILE = ROOT / "config" / "settings.py"


def manage(*args: str, env: dict[str, str] | None = None, timeout: float = 120):
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@dataclass(frozen=True)
class Result:
    """What manage() answers too (subprocess.CompletedProcess's fields that tests read)."""

    returncode: int
    stdout: str
    stderr: str


def run_command(*args: str, env: dict[str, str] | None = None) -> Result:
    """`manage.py *args` with `env` added to this process's environment (as manage() runs
    it), run in this process through call_command: the exit code, stdout and stderr that the
    real process gives. An exception the command does not handle is raised here (a real
    process would print its traceback and exit 1): the test fails either way."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with as_a_process_with(env or {}, stdout, stderr):
        returncode = run(args, stdout, stderr)
    return Result(returncode, stdout.getvalue(), stderr.getvalue())


def run_beside(*args: str) -> Result:
    """`manage.py *args` for a command that only talks HTTP to a service (gate, model_status
    --base-url), run in this process with this process's settings and backend left as they
    are: beside an app this process serves (tests/support/in_process.py served_here), whose
    backend run_command's fresh start would replace. The exit code and the command's stdout
    and stderr are the real process's; the served app's log lines stay out of them, as they
    would in a process of its own."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        returncode = run(args, stdout, stderr)
    return Result(returncode, stdout.getvalue(), stderr.getvalue())


def run(args: tuple[str, ...], stdout: io.StringIO, stderr: io.StringIO) -> int:
    """manage.py's handling of one command line (ManagementUtility.execute, then
    BaseCommand.run_from_argv), with call_command running the command."""
    from django.core.management import CommandError, ManagementUtility, call_command
    from django.core.management.base import SystemCheckError

    try:
        # An unknown command, --help and argparse's errors (usage, then "error: ...", exit
        # 2) as manage.py prints them; call_command would raise CommandError for them.
        command = ManagementUtility(["manage.py", *args]).fetch_command(args[0])
        command._called_from_command_line = True
        command.create_parser("manage.py", args[0]).parse_args(args[1:])
        # call_command skips the system checks unless told; manage.py runs them.
        checks = {"skip_checks": False} if command.requires_system_checks else {}
        call_command(*args, stdout=stdout, stderr=stderr, **checks)
    except CommandError as error:
        # As run_from_argv prints it (a SystemCheckError formats itself).
        line = str(error) if isinstance(error, SystemCheckError) else f"CommandError: {error}"
        stderr.write(line if line.endswith("\n") else line + "\n")
        return error.returncode
    except SystemExit as exit:
        if exit.code is None or isinstance(exit.code, int):
            return int(exit.code or 0)
        stderr.write(f"{exit.code}\n")  # what the interpreter does with sys.exit("text")
        return 1
    return 0


def settings_of(environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings of a process started with this environment: config/settings.py evaluated
    with it. (Such a process loads tests.settings, this one's DJANGO_SETTINGS_MODULE, which
    only adds defaults of SECRET_KEY, ALLOWED_HOSTS, TORCH_THREADS and GEN_NICE to the
    environment; this process's environment, which the child's inherits, already has them.)"""
    with mock.patch.dict(os.environ, environ, clear=True):
        namespace = runpy.run_path(str(SETTINGS_FILE), run_name="_command_settings")
    return {key: value for key, value in namespace.items() if key.isupper()}


def cached_builders() -> list[Any]:
    """The process-wide objects built once from the settings: the compute device and the
    thread places (the backend, with its Redis clients, is installed, not cached:
    start_afresh builds it anew)."""
    from imagegen.api import places
    from imagegen.model import device

    return [device.compute_device, places._stream_places, places._waiter_places]


def start_afresh() -> None:
    """What a process's start makes of its settings, made again from the current ones: the
    caches emptied, then the app's ready() (the device, the job board), as django.setup()
    does. (The job board made before keeps its idle generation thread, if it had one.)"""
    from django.apps import apps

    from imagegen import backend

    for builder in cached_builders():
        builder.cache_clear()
    backend.install(None)
    apps.get_app_config("imagegen").ready()


@contextlib.contextmanager
def as_a_process_with(
    env: Mapping[str, str], stdout: io.StringIO, stderr: io.StringIO
) -> Iterator[None]:
    """This process made, for the duration, like one that manage() starts with `env`: that
    environment, the settings it gives (only those that differ are overridden: this
    process's SECRET_KEY and the rest stay), the objects built from them, and its output
    (sys.stdout, sys.stderr, log records, warnings) in `stdout` and `stderr`. Afterwards
    this process's own are back."""
    from django.conf import settings
    from django.test import override_settings

    assert "DJANGO_SETTINGS_MODULE" not in env, "another settings module: use manage()"
    environ = {**os.environ, **env}
    # manage.py gives a process without a key a key of its own; any key does.
    environ.setdefault("SECRET_KEY", settings.SECRET_KEY)
    changed = {
        key: value
        for key, value in settings_of(environ).items()
        if not hasattr(settings, key) or getattr(settings, key) != value
    }
    try:
        with (
            mock.patch.dict(os.environ, environ, clear=True),
            override_settings(**changed),
            contextlib.redirect_stdout(stdout),
            contextlib.redirect_stderr(stderr),
            operator_output(stderr),
        ):
            start_afresh()
            yield
    finally:
        start_afresh()


@contextlib.contextmanager
def operator_output(stderr: io.StringIO) -> Iterator[None]:
    """What a manage.py process writes to its stderr besides the command's and sys.stderr's
    lines: log records (through the settings' console handler, which keeps the stream it was
    made with, at the settings' root level) and warnings (DeprecationWarnings ignored, as in
    a fresh interpreter; pytest shows them)."""
    from django.conf import settings

    root = logging.getLogger()
    console = [handler for handler in root.handlers if handler.get_name() == "console"]
    assert console, "the settings' LOGGING names its handler 'console'"
    streams = [_swap_stream(handler, stderr) for handler in console]
    level = root.level
    root.setLevel(settings.LOGGING["root"]["level"])

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=PendingDeprecationWarning)
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
            warnings.showwarning = show
            yield
    finally:
        root.setLevel(level)
        for handler, stream in zip(console, streams, strict=True):
            _swap_stream(handler, stream)


def _swap_stream(handler: logging.Handler, stream: Any) -> Any:
    """The handler's stream replaced, the old one returned unflushed: a test that configured
    logging while pytest captured its output may have left a handler on a closed stream,
    which StreamHandler.setStream's flush would raise on."""
    assert isinstance(handler, logging.StreamHandler)
    handler.acquire()
    try:
        old, handler.stream = handler.stream, stream
    finally:
        handler.release()
    return old
