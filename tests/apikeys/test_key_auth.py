"""Named keys at the door, in process against the real key store, over HTTP to this
process's app: taken wherever API_TOKEN is (Bearer, A1111's Basic password), refused at once
once revoked by another process (manage.py keys) or rotated, and, with MongoDB unreachable, a
503 for a key while API_TOKEN and /health go on without the database."""

import logging
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import mongoengine
import pytest
import requests
from django.test import override_settings

from apikeys import services
from scripts.embedded_mongo import EmbeddedMongo
from tests.support.commands import manage
from tests.support.in_process_app import LoopbackApp, in_process_app
from tests.support.key_database import connected_database
from todos.connection import connect_database

TOKEN = "the-api-token-of-the-environment"
UNREACHABLE = "mongodb://127.0.0.1:9/keys"


@pytest.fixture(scope="module")
def db_uri(mongo: EmbeddedMongo) -> Iterator[str]:
    """The module's database, this process's MongoEngine connected to it (the app's key
    lookups and the keys the tests make)."""
    with connected_database(mongo, "keys") as uri:
        yield uri


@pytest.fixture(scope="module")
def app(
    db_uri: str, hub_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LoopbackApp]:
    """The app with API_TOKEN and named keys on (no model: none of these routes needs one)."""
    work = tmp_path_factory.mktemp("keys-auth")
    with in_process_app(hub_root, work, pulled=False, API_KEYS=True, API_TOKEN=TOKEN) as served:
        yield served


@pytest.fixture
def unreachable(db_uri: str) -> Iterator[None]:
    """This process's key store is a MongoDB nobody answers on (300 ms to give up); after
    the test, the suite's database with the timeouts in force before it."""
    with override_settings(MONGODB_URI=UNREACHABLE, MONGODB_TIMEOUT_MS=300):
        mongoengine.disconnect()
        connect_database()
        yield
        mongoengine.disconnect()
    connect_database()


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def test_a_key_opens_what_the_token_opens_in_the_same_places(app: LoopbackApp) -> None:
    secret = services.key_create(name=f"k{uuid.uuid4().hex[:6]}").secret
    assert requests.get(app.url("/jobs"), headers=bearer(secret), timeout=10).status_code == 200
    assert requests.get(app.url("/v1/models"), headers=bearer(secret), timeout=10).ok
    basic = requests.get(app.url("/sdapi/v1/sd-models"), auth=("anyone", secret), timeout=10)
    assert basic.status_code == 200, basic.text
    assert requests.get(app.url("/jobs"), headers=bearer(TOKEN), timeout=10).status_code == 200
    for headers in ({}, bearer(secret + "x"), bearer("igk_000000000000_guess")):
        refused = requests.get(app.url("/jobs"), headers=headers, timeout=10)
        assert refused.status_code == 401, refused.text
    refused = requests.get(app.url("/sdapi/v1/sd-models"), auth=("a", "wrong"), timeout=10)
    assert refused.status_code == 401


def test_a_key_revoked_by_another_process_is_refused_at_once(app: LoopbackApp, db_uri: str) -> None:
    """The app took the key a moment before: nothing of it is kept between requests."""
    name = f"k{uuid.uuid4().hex[:6]}"
    secret = services.key_create(name=name).secret
    assert requests.get(app.url("/jobs"), headers=bearer(secret), timeout=10).ok
    revoked = manage("keys", "revoke", name, env={"MONGODB_URI": db_uri})
    assert revoked.returncode == 0, revoked.stderr
    # No wait: each request reads its key (apikeys.selectors).
    refused = requests.get(app.url("/jobs"), headers=bearer(secret), timeout=10)
    assert refused.status_code == 401


def test_a_rotated_key_is_refused_at_once(app: LoopbackApp) -> None:
    name = f"k{uuid.uuid4().hex[:6]}"
    old = services.key_create(name=name).secret
    assert requests.get(app.url("/jobs"), headers=bearer(old), timeout=10).ok
    new = services.key_rotate(name=name).secret
    assert requests.get(app.url("/jobs"), headers=bearer(old), timeout=10).status_code == 401
    assert requests.get(app.url("/jobs"), headers=bearer(new), timeout=10).ok


def test_no_secret_in_the_logs_or_the_answers(app: LoopbackApp, caplog) -> None:
    """What the app logs of each request (the access log's line is gunicorn's, of the path
    and Basic's user name only: tests/config/test_access_log.py)."""
    secret = services.key_create(name=f"k{uuid.uuid4().hex[:6]}").secret
    with caplog.at_level(logging.DEBUG):
        answers = [
            requests.get(app.url(path), headers=bearer(secret), timeout=10)
            for path in ("/jobs", "/v1/models", "/api", "/nowhere")
        ]
        answers.append(requests.get(app.url("/jobs"), headers=bearer(secret + "x"), timeout=10))
    # The part after "igk_<id>_" (its own characters may include "_").
    random_part = secret.split("_", 2)[2]
    assert len(random_part) >= 32
    for answer in answers:
        assert random_part not in answer.text
        assert random_part not in str(answer.headers)
    assert random_part not in caplog.text


def test_with_the_database_unreachable_a_key_gets_503_and_the_token_still_works(
    app: LoopbackApp, unreachable: None
) -> None:
    assert requests.get(app.url("/health"), timeout=10).ok
    assert requests.get(app.url("/jobs"), headers=bearer(TOKEN), timeout=10).ok
    key = "igk_0123456789ab_" + "x" * 43
    for answer in (
        requests.get(app.url("/jobs"), headers=bearer(key), timeout=10),
        requests.get(app.url("/sdapi/v1/sd-models"), auth=("a", key), timeout=10),
        requests.get(app.url("/v1/models"), headers=bearer(key), timeout=10),
    ):
        assert answer.status_code == 503, answer.text
        assert answer.headers["Retry-After"] == "5"
        assert "key store (MongoDB) is unreachable" in answer.text
    # Not of a key's form: refused without asking the database.
    assert requests.get(app.url("/jobs"), headers=bearer("guess"), timeout=10).status_code == 401


def test_the_page_asks_for_a_key_when_only_named_keys_are_on(client, settings) -> None:
    settings.API_TOKEN, settings.API_KEYS = "", True
    page = client.get("/ui/").content.decode()
    config = re.search(r"<script id=\"ui-config\" type=\"application/json\">(.*?)</script>", page)
    assert config and '"tokenRequired": true' in config.group(1)


@pytest.mark.parametrize(
    ("token", "keys", "warned"), [("", False, True), ("", True, False), ("t", False, False)]
)
def test_only_a_service_with_neither_token_nor_keys_warns_that_it_is_open(
    settings, caplog, token: str, keys: bool, warned: bool
) -> None:
    from apikeys.auth import warn_if_open

    settings.API_TOKEN, settings.API_KEYS, settings.DEBUG = token, keys, False
    with caplog.at_level("INFO", logger="apikeys.auth"):
        warn_if_open()
    assert ("API_TOKEN is not set and API_KEYS is off" in caplog.text) is warned


@pytest.mark.parametrize(
    ("keys", "caller", "told"),
    [
        (True, "admin", True),
        (True, "token", True),
        (True, "key", False),  # sees only its own
        (True, None, False),
        (False, "token", False),  # API_TOKEN alone: every job is the token's
    ],
)
def test_only_an_admin_is_told_whose_each_job_is_and_only_with_named_keys(
    settings, keys: bool, caller: str | None, told: bool
) -> None:
    """What decides `owner` in answers (docs/keys.md, "What a key sees")."""
    from django.http import HttpRequest

    from apikeys.auth import sees_owners
    from apikeys.selectors import TOKEN_CALLER, Caller

    settings.API_KEYS = keys
    request = HttpRequest()
    request.auth = {  # type: ignore[attr-defined]
        "admin": Caller(name="ops", admin=True),
        "token": TOKEN_CALLER,
        "key": Caller(name="alice", admin=False),
        None: None,
    }[caller]
    assert sees_owners(request) is told
