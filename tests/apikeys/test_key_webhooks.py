"""A key's webhook defaults: `keys create|update --webhook URL` names where its asynchronous
jobs are told, `keys webhook-secret NAME` makes and shows once the key's own signing secret
(kept as it is, since it must sign; the API secret stays hashed and `create` prints it alone),
and the service then signs that key's webhooks with it instead of WEBHOOK_SECRET."""

import base64

import pytest

from apikeys import selectors
from apikeys.documents import keys_collection
from core.errors import FieldError
from imagegen import services
from tests.support.commands import run_command

SERVICE = "whsec_" + base64.b64encode(b"s" * 32).decode()


def test_create_and_update_set_the_keys_default_webhook(keys_db: str) -> None:
    created = run_command("keys", "create", "alice", "--webhook", "https://hooks.example/a")
    assert created.returncode == 0, created.stderr
    secret = created.stdout.strip()
    assert created.stdout.count("\n") == 1 and secret.startswith("igk_")  # the API secret alone
    assert selectors.key_caller(secret=secret).webhook_url == "https://hooks.example/a"

    assert (
        run_command("keys", "update", "alice", "--webhook", "https://hooks.example/b").returncode
        == 0
    )
    assert selectors.key_caller(secret=secret).webhook_url == "https://hooks.example/b"
    assert run_command("keys", "update", "alice", "--webhook", "").returncode == 0
    assert selectors.key_caller(secret=secret).webhook_url is None

    bad = run_command("keys", "update", "alice", "--webhook", "ftp://hooks.example/")
    assert bad.returncode == 2 and "--webhook: must be an http or https URL" in bad.stderr
    missing = run_command("keys", "update", "nobody", "--webhook", "https://hooks.example/")
    assert missing.returncode == 2 and "no live key named 'nobody'" in missing.stderr


def test_webhook_secret_makes_the_keys_own_signing_secret_and_shows_it_once(
    keys_db: str, settings
) -> None:
    settings.WEBHOOK_SECRET = [SERVICE]
    api_secret = run_command("keys", "create", "alice").stdout.strip()
    caller = selectors.key_caller(secret=api_secret)
    assert not caller.signs_webhooks
    plan = services.webhook_plan(url="https://93.184.216.34/h", caller=caller, origin="http://o",
                                 asynchronous=True)  # fmt: skip
    assert plan.signer == "service" and services.webhook_secrets(plan.signer) == [SERVICE]

    made = run_command("keys", "webhook-secret", "alice")
    assert made.returncode == 0, made.stderr
    own = made.stdout.strip()
    assert made.stdout.count("\n") == 1 and own.startswith("whsec_")
    assert own not in made.stderr and len(base64.b64decode(own[6:])) == 32
    assert selectors.key_webhook_secret(name="alice") == own
    assert api_secret not in str(keys_collection().find_one({"name": "alice"}))

    settings.WEBHOOK_SECRET = []  # the key's own secret is enough
    caller = selectors.key_caller(secret=api_secret)
    plan = services.webhook_plan(url="https://93.184.216.34/h", caller=caller, origin="http://o",
                                 asynchronous=True)  # fmt: skip
    assert plan.signer == "key:alice" and services.webhook_secrets(plan.signer) == [own]

    again = run_command("keys", "webhook-secret", "alice").stdout.strip()
    assert again != own and services.webhook_secrets("key:alice") == [again]


def test_a_keys_default_webhook_is_taken_by_its_asynchronous_jobs_and_checked(
    keys_db: str, settings
) -> None:
    """The request's own webhook_url first, else the key's --webhook (asynchronous jobs
    only), else WEBHOOK_URL; the key's is checked by the address rules as a request's is,
    and a refusal names it."""
    settings.WEBHOOK_SECRET = [SERVICE]
    settings.WEBHOOK_ALLOW = []
    settings.WEBHOOK_URL = "https://93.184.216.35/service"
    secret = run_command("keys", "create", "bob", "--webhook", "https://93.184.216.34/bob")
    caller = selectors.key_caller(secret=secret.stdout.strip())

    def plan(url: str | None = None, asynchronous: bool = True):
        return services.webhook_plan(url=url, caller=caller, origin="http://o",
                                     asynchronous=asynchronous)  # fmt: skip

    assert plan().url == "https://93.184.216.34/bob"
    assert plan("https://93.184.216.36/own").url == "https://93.184.216.36/own"
    assert plan(asynchronous=False) is None
    open_plan = services.webhook_plan(url=None, caller=None, origin="o", asynchronous=True)
    assert open_plan is not None and open_plan.url == "https://93.184.216.35/service"
    run_command("keys", "update", "bob", "--webhook", "http://10.0.0.7/hook")
    caller = selectors.key_caller(secret=secret.stdout.strip())
    with pytest.raises(FieldError) as refused:
        plan()
    assert refused.value.field == "the key's --webhook" and "not public" in refused.value.rule
