"""Webhooks' rules in process: which URLs a webhook may reach, refused at submit as a 400
naming the field and the rule with nothing queued; the Standard Webhooks signature as the
`standardwebhooks` package verifies it; the retry schedule. (The outboxes:
test_webhook_outbox.py; end to end: test_webhooks.py.)"""

import base64
import importlib
import ipaddress
import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client, RequestFactory
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

import config.settings
from imagegen import backend
from imagegen.api.native import link_origin
from imagegen.webhooks.addresses import Allowance, UrlRefused, check_url
from imagegen.webhooks.delivery import LONGEST_WAIT, next_wait
from imagegen.webhooks.signing import signed_headers

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
OTHER = "whsec_" + base64.b64encode(b"o" * 32).decode()
NOTHING = Allowance.parse([])


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        ("ftp://93.184.216.34/", "must be an http or https URL"),
        ("file:///etc/passwd", "must be an http or https URL"),
        ("http:///nohost", "must name a host"),
        ("http://user:pw@93.184.216.34/", "user name or password"),
        ("http://127.0.0.1:8000/hook", "not public"),
        ("http://localhost/hook", "not public"),
        ("http://10.1.2.3/", "not public"),
        ("http://192.168.0.1/", "not public"),
        ("http://172.16.0.1/", "not public"),
        ("http://100.64.0.1/", "not public"),  # shared address space (CGNAT)
        ("http://169.254.169.254/latest/meta-data/", "not public"),  # a cloud's metadata
        ("http://0.0.0.0/", "not public"),
        ("http://[::1]/", "not public"),
        ("http://[fe80::1]/", "not public"),
        ("http://[::ffff:127.0.0.1]/", "not public"),  # IPv4 written as IPv6
        ("http://224.0.0.1/", "not public"),
        ("http://nonexistent.invalid/", "does not resolve"),
        ("http://93.184.216.34/" + "a" * 2048, "at most 2048"),
    ],
)
def test_a_url_that_breaks_a_rule_is_refused_naming_it(url: str, rule: str) -> None:
    with pytest.raises(UrlRefused) as refused:
        check_url(url, NOTHING)
    assert rule in refused.value.rule


def test_public_addresses_pass_and_webhook_allow_admits_the_named_ones() -> None:
    check_url("https://93.184.216.34/hook?x=1", NOTHING)
    check_url("http://127.0.0.1:9/hook", Allowance.parse(["127.0.0.1"]))
    check_url("http://10.1.2.3/", Allowance.parse(["10.0.0.0/8"]))
    check_url("http://localhost/", Allowance.parse(["localhost"]))
    with pytest.raises(UrlRefused):
        check_url("http://10.1.2.3/", Allowance.parse(["127.0.0.1", "192.168.0.0/16"]))


def generate(client: Client, **fields: str):
    return client.post("/generate", {"prompt": "a cat", "async": "true", **fields})


def refusal(response) -> dict[str, str]:
    assert response.status_code == 400, response.content
    return {d["field"]: d["message"] for d in response.json()["error"]["details"]}


def test_a_webhook_to_a_private_address_is_a_400_naming_the_field_and_rule(settings) -> None:
    settings.WEBHOOK_SECRET = [SECRET]
    settings.WEBHOOK_ALLOW = []
    details = refusal(generate(Client(), webhook_url="http://127.0.0.1:9/hook"))
    assert "not public" in details["webhook_url"]
    assert "WEBHOOK_ALLOW" in details["webhook_url"]
    details = refusal(generate(Client(), webhook_url="gopher://93.184.216.34/"))
    assert "http or https" in details["webhook_url"]
    assert backend.current_backend().jobs.recent(1) == []  # refused before anything was queued


def test_a_webhook_with_no_secret_configured_is_a_400_naming_webhook_secret(settings) -> None:
    settings.WEBHOOK_SECRET = []
    settings.WEBHOOK_ALLOW = ["127.0.0.1"]
    details = refusal(generate(Client(), webhook_url="http://127.0.0.1:9/hook"))
    assert "WEBHOOK_SECRET" in details["webhook_url"]
    assert backend.current_backend().jobs.recent(1) == []


def test_a_synchronous_request_naming_a_webhook_is_refused(settings) -> None:
    settings.WEBHOOK_SECRET = [SECRET]
    response = Client().post("/generate", {"prompt": "a cat", "webhook_url": "http://x.example/"})
    assert "only with async=true" in refusal(response)["webhook_url"]


def test_a_service_webhook_the_rules_refuse_is_a_400_naming_webhook_url_setting(settings) -> None:
    settings.WEBHOOK_SECRET = [SECRET]
    settings.WEBHOOK_URL = "http://10.0.0.5/hook"
    settings.WEBHOOK_ALLOW = []
    assert "not public" in refusal(generate(Client()))["WEBHOOK_URL"]


def test_the_package_verifier_accepts_a_signed_body_and_refuses_one_changed_by_a_byte() -> None:
    body = json.dumps({"type": "job.succeeded", "data": {"id": "abc"}})
    headers = signed_headers(msg_id="msg_abc", body=body, secrets=[SECRET], at=datetime.now(UTC))
    assert Webhook(SECRET).verify(body, headers) == json.loads(body)
    changed = body.replace("abc", "abd")
    assert len(changed) == len(body)
    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET).verify(changed, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(OTHER).verify(body, headers)


def test_during_a_rotation_each_secret_signs_and_either_verifies() -> None:
    body = '{"type":"job.failed"}'
    headers = signed_headers(msg_id="m", body=body, secrets=[SECRET, OTHER], at=datetime.now(UTC))
    assert len(headers["webhook-signature"].split(" ")) == 2
    Webhook(SECRET).verify(body, headers)
    Webhook(OTHER).verify(body, headers)


def test_retries_start_at_a_second_double_with_jitter_and_wait_at_most_five_minutes() -> None:
    assert next_wait(1, rng=lambda a, b: 1.0) == 1.0
    assert next_wait(2, rng=lambda a, b: 1.0) == 2.0
    assert next_wait(5, rng=lambda a, b: 1.0) == 16.0
    assert next_wait(4, rng=lambda a, b: a) == 6.0 and next_wait(4, rng=lambda a, b: b) == 10.0
    assert next_wait(30) == LONGEST_WAIT and next_wait(1000) == LONGEST_WAIT
    waits = {next_wait(3) for _ in range(50)}
    assert len(waits) > 1 and all(3.0 <= w <= 5.0 for w in waits)


@pytest.fixture
def environment() -> Iterator[None]:
    """config/settings.py run again with the test's variables; afterwards as it was."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)
    importlib.reload(config.settings)


@pytest.mark.parametrize("value", ["hunter2", f"{SECRET} sk_live_abc", "whsec_"])
def test_a_webhook_secret_not_of_the_whsec_form_stops_the_start(environment, value) -> None:
    os.environ["WEBHOOK_SECRET"] = value
    with pytest.raises(ImproperlyConfigured, match="WEBHOOK_SECRET: each secret is whsec_"):
        importlib.reload(config.settings)


def test_webhook_settings_are_read_as_documented(environment) -> None:
    os.environ["WEBHOOK_SECRET"] = f" {SECRET}  {OTHER} "
    os.environ["WEBHOOK_ALLOW"] = "127.0.0.1, 10.0.0.0/8,hooks.internal"
    os.environ["PUBLIC_URL"] = "https://img.example.com/"
    for name in ("WEBHOOK_RETRY_SECONDS", "WEBHOOK_SENDERS", "WEBHOOK_URL"):
        os.environ.pop(name, None)
    settings = importlib.reload(config.settings)
    assert settings.WEBHOOK_SECRET == [SECRET, OTHER]
    assert settings.WEBHOOK_ALLOW == ["127.0.0.1", "10.0.0.0/8", "hooks.internal"]
    assert settings.PUBLIC_URL == "https://img.example.com"
    assert (settings.WEBHOOK_RETRY_SECONDS, settings.WEBHOOK_SENDERS) == (86400, 4)
    assert settings.WEBHOOK_URL == ""


def test_the_links_origin_is_public_url_else_the_requests_behind_trusted_proxies(settings):
    settings.PUBLIC_URL = ""
    settings.TRUSTED_PROXIES = [ipaddress.ip_network("10.0.0.0/8")]
    forwarded = {"HTTP_X_FORWARDED_PROTO": "https", "HTTP_X_FORWARDED_HOST": "localhost"}
    plain = RequestFactory().post("/generate", REMOTE_ADDR="192.0.2.1", **forwarded)
    assert (
        link_origin(plain) == "http://testserver"
    )  # forwarded headers of a stranger: not believed
    proxied = RequestFactory().post("/generate", REMOTE_ADDR="10.1.1.1", **forwarded)
    assert link_origin(proxied) == "https://localhost"
    settings.PUBLIC_URL = "https://img.example.com"
    assert link_origin(proxied) == "https://img.example.com"
