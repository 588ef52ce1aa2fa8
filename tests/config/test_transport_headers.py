"""What a browser is told about framing and https: X-Frame-Options on every answer and
`frame-ancestors 'none'` on the page, and HSTS on https requests behind a proxy that ends TLS
(SECURE_PROXY_SSL_HEADER, SECURE_HSTS_SECONDS: what the Azure templates set)."""

import requests
from django.test import Client, override_settings

from tests.support.key_database import connected_database


def test_no_answer_may_be_framed(client, mongo) -> None:
    with connected_database(mongo, "framing"):  # the todo routes' answer reads the database
        for path in ("/health", "/api", "/ui/", "/nowhere", "/todos/x/y"):
            assert client.get(path)["X-Frame-Options"] == "DENY", path
    assert "frame-ancestors 'none'" in client.get("/ui/")["Content-Security-Policy"]


def test_hsts_only_on_https_and_only_when_asked_for() -> None:
    assert "Strict-Transport-Security" not in Client().get("/health", secure=True)
    proxied = {"HTTP_X_FORWARDED_PROTO": "https"}
    with override_settings(SECURE_HSTS_SECONDS=600):
        assert Client().get("/health", secure=True)["Strict-Transport-Security"] == "max-age=600"
        assert "Strict-Transport-Security" not in Client().get("/health", **proxied)
    header = ("HTTP_X_FORWARDED_PROTO", "https")
    with override_settings(SECURE_HSTS_SECONDS=600, SECURE_PROXY_SSL_HEADER=header):
        assert Client().get("/health", **proxied)["Strict-Transport-Security"] == "max-age=600"
        assert "Strict-Transport-Security" not in Client().get("/health")


def test_the_settings_reach_the_service_from_its_environment(start_app) -> None:
    """As the Azure templates set them: links https and HSTS behind the ingress."""
    app = start_app(
        TRUSTED_PROXIES="127.0.0.1/32", SECURE_PROXY_SSL_HEADER="1", SECURE_HSTS_SECONDS="60"
    )
    behind = requests.get(app.url("/health"), headers={"X-Forwarded-Proto": "https"}, timeout=10)
    assert behind.headers["Strict-Transport-Security"] == "max-age=60"
    assert behind.headers["X-Frame-Options"] == "DENY"
    plain = requests.get(app.url("/health"), timeout=10)
    assert "Strict-Transport-Security" not in plain.headers
