"""manage.py keys: create, list, revoke and rotate named API keys.

The secret is printed once, alone on stdout, so a pipe takes it as is."""

import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from pymongo.errors import PyMongoError

from apikeys.errors import KeyRefused
from apikeys.selectors import key_list
from apikeys.services import (
    key_create,
    key_revoke,
    key_rotate,
    key_update,
    key_webhook_secret,
)
from core.timestamps import iso_ms


class Command(BaseCommand):
    help = "Manage the named API keys kept in MongoDB (docs/keys.md)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="make a key and print its secret once")
        create.add_argument("name")
        create.add_argument(
            "--admin", action="store_true", help="sees and cancels every job, pulls, scrapes"
        )
        create.add_argument(
            "--scope", default="api", help="api (default): the routes of ordinary use; "
            "metrics: GET /metrics alone (a scraper's key)",
        )  # fmt: skip
        create.add_argument("--max-queued", type=int, help="jobs queued or running at once")
        create.add_argument("--per-minute", type=int, help="images a minute")
        create.add_argument("--webhook", help="where its asynchronous jobs are told they ended")
        update = actions.add_parser("update", help="change a key's default webhook")
        update.add_argument("name")
        update.add_argument("--webhook", help="an http(s) URL; '' removes it")
        webhook_secret = actions.add_parser(
            "webhook-secret", help="make the key's own webhook signing secret and print it once"
        )
        webhook_secret.add_argument("name")
        actions.add_parser("list", help="name, created, last used, limits (never the secret)")
        revoke = actions.add_parser("revoke", help="refuse the key from now on")
        revoke.add_argument("name")
        rotate = actions.add_parser("rotate", help="a new secret for the key; the old one stops")
        rotate.add_argument("name")

    def handle(self, *args, **options) -> None:
        try:
            getattr(self, f"do_{options['action'].replace('-', '_')}")(options)
        except KeyRefused as refusal:
            self.stderr.write(f"keys: {refusal}")
            sys.exit(2)
        except PyMongoError as error:
            self.stderr.write(f"keys: the database at MONGODB_URI did not answer: {error}")
            sys.exit(1)

    def do_create(self, options: dict) -> None:
        issued = key_create(
            name=options["name"],
            admin=options["admin"],
            scope=options["scope"],
            max_queued=options["max_queued"],
            per_minute=options["per_minute"],
            webhook_url=options["webhook"],
        )
        self._issued(issued.name, issued.secret, "created")

    def do_update(self, options: dict) -> None:
        key_update(name=options["name"], webhook_url=options["webhook"])
        self.stderr.write(f"key {options['name']!r} updated")

    def do_webhook_secret(self, options: dict) -> None:
        secret = key_webhook_secret(name=options["name"])
        self.stderr.write(
            f"key {options['name']!r}: its webhooks are signed with this secret from now on "
            "(give it to the receiver); shown this once:"
        )
        self.stdout.write(secret)

    def do_rotate(self, options: dict) -> None:
        issued = key_rotate(name=options["name"])
        self._issued(issued.name, issued.secret, "rotated")

    def do_revoke(self, options: dict) -> None:
        key_revoke(name=options["name"])
        self.stderr.write(f"key {options['name']!r} revoked: refused from the next request on")

    def do_list(self, options: dict) -> None:
        self.stdout.write("name\tadmin\tcreated\tlast used\tmax queued\tper minute\trevoked\tscope")
        for key in key_list():
            cells = (
                key.name,
                "yes" if key.admin else "no",
                iso_ms(key.created_at),
                iso_ms(key.last_used_at) or "never",
                key.max_queued or "-",
                key.per_minute or "-",
                iso_ms(key.revoked_at) or "-",
                key.scope or "api",
            )
            self.stdout.write("\t".join(str(cell) for cell in cells))

    def _issued(self, name: str, secret: str, what: str) -> None:
        self.stderr.write(f"key {name!r} {what}; its secret, shown this once:")
        self.stdout.write(secret)
        # Warns, never fails, when the service does not take keys: keys may be made before they are
        # on.
        if settings.API_KEYS:
            self.stderr.write("API_KEYS is on: the service takes it from the next request on")
        else:
            self.stderr.write(
                "warning: API_KEYS is off, so the service does not take named keys yet: "
                "start it with API_KEYS=1 (docs/keys.md)"
            )
