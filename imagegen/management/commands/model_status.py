"""manage.py model_status: the model on the local share, or a running service's state."""

import json
import sys

from django.core.management.base import BaseCommand, CommandParser

from imagegen.backend import model_source
from imagegen.model import share
from imagegen.ops.client import ServiceClient, Unreachable


class Command(BaseCommand):
    help = (
        "Show whether the configured model is complete on the share (revision, size), or with "
        "--base-url the running service's /model/status."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--base-url", help="ask this running service instead of the share")
        parser.add_argument("--json", action="store_true", help="print JSON, for scripts")

    def handle(self, *args, **options) -> None:
        status = self.remote(options["base_url"]) if options["base_url"] else self.local()
        if options["json"]:
            self.stdout.write(json.dumps(status, indent=2))
        else:
            for key, value in status.items():
                self.stdout.write(f"{key:>18}: {value}")

    def remote(self, base_url: str) -> dict:
        try:
            answer = ServiceClient(base_url).get("/model/status")
        except Unreachable as error:
            self.stderr.write(f"model_status: {base_url} unreachable: {error}")
            sys.exit(1)
        if not answer.ok:
            self.stderr.write(f"model_status: /model/status answered {answer.status}")
            sys.exit(1)
        return answer.json()

    def local(self) -> dict:
        source = model_source()
        complete = source.complete_manifest()
        found = complete or share.read_manifest(source.path)
        return {
            "model_id": source.model_id,
            "revision": source.revision,
            "variant": source.variant,
            "model_path": str(source.path),
            "complete": complete is not None,
            "commit": found.commit if found else None,
            "files": len(found.files) if found else 0,
            "bytes": found.total_bytes if found else 0,
            "completed_at": found.completed_at if found else None,
        }
