"""manage.py gate: the post-deployment gate (see imagegen.ops.gate for the steps)."""

import os
import sys
import textwrap

from django.core.management.base import BaseCommand, CommandParser, DjangoHelpFormatter

from imagegen.ops.client import ServiceClient
from imagegen.ops.gate import ExitCode, GateFailure, GateTimings, run_gate
from imagegen.ops.platform import DEFAULT_TIMEOUT as DEFAULT_PLATFORM_TIMEOUT
from imagegen.ops.platform import ensure_image_command


def exit_codes_help(width: int = 79) -> str:
    """The exit codes for --help, one a line, from ExitCode's own meanings."""
    lines = ["exit codes:"]
    for code in ExitCode:
        lines += textwrap.wrap(
            code.meaning, width, initial_indent=f"  {int(code):<4}", subsequent_indent=" " * 6
        )
    return "\n".join(lines)


EPILOG = exit_codes_help()


class ExitCodesHelpFormatter(DjangoHelpFormatter):
    """Keeps the exit-code list one code a line; argparse would run it into one paragraph."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text != EPILOG:
            return super()._fill_text(text, width, indent)
        return "\n".join(indent + line for line in text.splitlines())


class Command(BaseCommand):
    help = (
        "Post-deployment gate: checks that the application (not a placeholder) answers, waits "
        "for /health, POSTs /model/pull and polls /model/status until the model is ready."
    )

    def create_parser(self, prog_name: str, subcommand: str, **kwargs):
        kwargs.setdefault("formatter_class", ExitCodesHelpFormatter)
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.epilog = EPILOG
        return parser

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--base-url", required=True, help="the service, e.g. https://app.example"
        )
        parser.add_argument(
            "--timeout", type=float, default=1800,
            help="seconds for the model to become ready after the pull (default 1800)",
        )  # fmt: skip
        parser.add_argument(
            "--interval", type=float, default=10, help="seconds between status polls (default 10)"
        )
        parser.add_argument(
            "--health-timeout", type=float, default=300,
            help="seconds for /health to succeed (default 300)",
        )  # fmt: skip
        parser.add_argument(
            "--request-timeout", type=float, default=10,
            help="seconds one request may wait for its answer before it counts as unanswered "
            "(default 10; the service answers each at once, the pull included)",
        )  # fmt: skip
        parser.add_argument(
            "--token", default=os.environ.get("API_TOKEN"),
            help="bearer token for the pull (default: $API_TOKEN)",
        )  # fmt: skip
        parser.add_argument(
            "--container-app", help="Azure Container App name: remove a command override first"
        )
        parser.add_argument("--resource-group", help="its resource group (with --container-app)")
        parser.add_argument(
            "--platform-timeout", type=float, default=DEFAULT_PLATFORM_TIMEOUT,
            help="seconds for the platform step (with --container-app): the update and a new "
            "revision becoming ready, which starts a node, pulls the image and passes the "
            f"startup probe (default {DEFAULT_PLATFORM_TIMEOUT:g}; polled every --interval)",
        )  # fmt: skip

    def handle(self, *args, **options) -> None:
        def say(line: str) -> None:
            self.stdout.write(f"gate: {line}")
            self.stdout.flush()

        client = ServiceClient(
            options["base_url"], token=options["token"], timeout=options["request_timeout"]
        )
        timings = GateTimings(options["timeout"], options["interval"], options["health_timeout"])
        try:
            if options["container_app"]:
                if not options["resource_group"]:
                    raise GateFailure(ExitCode.PLATFORM, "--container-app needs --resource-group")
                ensure_image_command(
                    options["container_app"],
                    options["resource_group"],
                    say,
                    timeout=options["platform_timeout"],
                    interval=options["interval"],
                )
            run_gate(client, timings, say)
        except GateFailure as failure:
            self.stderr.write(f"gate: FAILED: {failure}")
            sys.exit(failure.code)
        say("passed")
