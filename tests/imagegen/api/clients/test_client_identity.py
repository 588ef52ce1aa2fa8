"""Who a client is, and which forwarded headers are believed: in-process, on Django's own
request objects (apikeys.auth)."""

import importlib
import ipaddress
import os
import re
from collections.abc import Iterator

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import RequestFactory, override_settings

import config.settings
from apikeys.auth import client_address, client_identity, public_origin

PROXIES = [ipaddress.ip_network("10.0.0.0/16"), ipaddress.ip_network("127.0.0.1")]


def request(peer: str = "10.0.3.4", **headers: str):
    return RequestFactory().get("/v1/models", REMOTE_ADDR=peer, headers=headers)


@override_settings(TRUSTED_PROXIES=PROXIES)
def test_behind_trusted_proxies_the_nearest_untrusted_forwarded_address_is_the_client():
    assert client_address(request(**{"X-Forwarded-For": "198.51.100.9"})) == "198.51.100.9"
    # a client's own made-up entry is left of the one our proxy appended
    spoofed = request(**{"X-Forwarded-For": "1.2.3.4, 198.51.100.9, 10.0.0.7"})
    assert client_address(spoofed) == "198.51.100.9"
    assert client_address(request()) == "10.0.3.4"  # nothing forwarded: the peer


@pytest.mark.parametrize("proxies", [[], [ipaddress.ip_network("10.1.0.0/16")]])
def test_from_an_untrusted_peer_forwarded_headers_are_ignored(proxies):
    with override_settings(TRUSTED_PROXIES=proxies):
        forged = request(**{"X-Forwarded-For": "198.51.100.9", "X-Forwarded-Proto": "https",
                            "X-Forwarded-Host": "localhost"})  # fmt: skip
        assert client_address(forged) == "10.0.3.4"
        assert public_origin(forged) == "http://testserver"


@override_settings(TRUSTED_PROXIES=PROXIES)
def test_the_public_origin_behind_a_trusted_proxy():
    azure = request(**{"X-Forwarded-Proto": "https", "X-Forwarded-Host": "localhost"})
    assert public_origin(azure) == "https://localhost"
    # a host the service does not answer for is not put into links
    evil = request(**{"X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil.example"})
    assert public_origin(evil) == "https://testserver"


@override_settings(TRUSTED_PROXIES=PROXIES)
def test_identity_is_the_credential_and_the_address():
    base = client_identity(request(Authorization="Basic YTpi"))
    assert base == client_identity(request(Authorization="Basic YTpi"))
    assert base != client_identity(request(Authorization="Basic Yzpi"))  # another user name
    assert base != client_identity(request("127.0.0.1", Authorization="Basic YTpi"))
    assert "YTpi" not in base


@pytest.fixture
def environment() -> Iterator[None]:
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)
    importlib.reload(config.settings)


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"TRUSTED_PROXIES": "10.0.0.0/16,ingress"}, "TRUSTED_PROXIES: 'ingress' is not an IP"),
        ({"GEN_QUEUE_MAX": "2", "GEN_MAX_N": "4"}, "GEN_MAX_N must be at most GEN_QUEUE_MAX + 1"),
        ({"GEN_MAX_N": "0"}, "GEN_MAX_N must be at least 1"),
        ({"IMAGE_URL_TTL": "0"}, "IMAGE_URL_TTL must be at least 1"),
    ],
)
def test_bad_protocol_settings_refuse_to_start(environment, variables, message):
    os.environ.update(variables)
    with pytest.raises(ImproperlyConfigured, match=re.escape(message)):
        importlib.reload(config.settings)


def test_gen_max_n_defaults_to_what_the_queue_holds(environment):
    os.environ.pop("GEN_MAX_N", None)
    os.environ["GEN_QUEUE_MAX"] = "1"
    assert importlib.reload(config.settings).GEN_MAX_N == 2
    os.environ["GEN_QUEUE_MAX"] = "8"
    assert importlib.reload(config.settings).GEN_MAX_N == 4
