"""The key store and `manage.py keys`, in process against a real MongoDB: a secret is shown
once and stored only as a salted hash; revoke and rotate take effect on the next lookup."""

from datetime import timedelta

import pytest

from apikeys import selectors, services
from apikeys.documents import keys_collection
from apikeys.errors import BadKeyField, KeyNameTaken, KeyNotFound
from core.timestamps import utc_now
from tests.support.commands import run_command


def test_a_created_key_is_found_by_its_secret_and_no_other(keys_db: str) -> None:
    issued = services.key_create(name="alice", max_queued=2, per_minute=5)
    caller = selectors.key_caller(secret=issued.secret)
    assert caller == selectors.Caller(name="alice", admin=False, max_queued=2, per_minute=5)
    assert selectors.key_caller(secret=issued.secret + "x") is None
    assert selectors.key_caller(secret="igk_000000000000_nope") is None
    assert selectors.key_caller(secret="not-a-key") is None


def test_the_secret_is_not_in_the_database(keys_db: str) -> None:
    issued = services.key_create(name="alice")
    random_part = issued.secret.rsplit("_", 1)[1]
    (doc,) = keys_collection().find()
    assert random_part not in repr(doc)
    assert doc["salt"] and doc["digest"]
    # Salted: two keys' hashes are not comparable even were their secrets equal.
    services.key_create(name="bob")
    assert len({d["salt"] for d in keys_collection().find()}) == 2


def test_revoked_is_refused_at_the_next_lookup_and_its_name_stays_taken(keys_db: str) -> None:
    issued = services.key_create(name="alice")
    services.key_revoke(name="alice")
    assert selectors.key_caller(secret=issued.secret) is None
    with pytest.raises(KeyNameTaken):
        services.key_create(name="alice")
    with pytest.raises(KeyNotFound):
        services.key_revoke(name="alice")


def test_rotate_refuses_the_old_secret_and_keeps_the_name_and_limits(keys_db: str) -> None:
    old = services.key_create(name="alice", admin=True, per_minute=3)
    new = services.key_rotate(name="alice")
    assert new.secret != old.secret
    assert selectors.key_caller(secret=old.secret) is None
    assert selectors.key_caller(secret=new.secret) == selectors.Caller(
        name="alice", admin=True, max_queued=None, per_minute=3
    )
    with pytest.raises(KeyNotFound):
        services.key_rotate(name="nobody")


def test_a_lookup_records_when_the_key_was_last_used(keys_db: str) -> None:
    issued = services.key_create(name="alice")
    assert keys_collection().find_one()["lastUsedAt"] is None
    selectors.key_caller(secret=issued.secret)
    assert keys_collection().find_one()["lastUsedAt"] is not None


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"name": "two words"}, "name"),
        ({"name": "-dash"}, "name"),
        ({"name": "x" * 65}, "name"),
        ({"name": "ok", "max_queued": 0}, "--max-queued"),
        ({"name": "ok", "per_minute": -1}, "--per-minute"),
        ({"name": "ok", "scope": "everything"}, "--scope"),
        ({"name": "ok", "admin": True, "scope": "metrics"}, "--scope"),
    ],
)
def test_bad_fields_are_refused_naming_the_field(keys_db: str, fields: dict, named: str) -> None:
    with pytest.raises(BadKeyField, match=f"^{named}: "):
        services.key_create(**fields)
    assert keys_collection().count_documents({}) == 0


def test_the_command_shows_the_secret_once_and_lists_without_it(keys_db: str) -> None:
    created = run_command("keys", "create", "alice", "--max-queued", "1", "--per-minute", "4")
    assert created.returncode == 0, created.stderr
    secret = created.stdout.strip()
    assert selectors.key_caller(secret=secret).name == "alice"
    assert secret not in created.stderr

    admin = run_command("keys", "create", "root", "--admin")
    scraper = run_command("keys", "create", "prometheus", "--scope", "metrics")
    assert selectors.key_caller(secret=scraper.stdout.strip()).scope == "metrics"
    listed = run_command("keys", "list")
    assert listed.returncode == 0
    rows = [line.split("\t") for line in listed.stdout.splitlines()]
    assert rows[0][0] == "name"
    assert [r[0] for r in rows[1:]] == ["alice", "root", "prometheus"]
    assert [r[7] for r in rows[1:]] == ["api", "api", "metrics"]
    assert rows[1][1] == "no" and rows[1][4:6] == ["1", "4"] and rows[1][3] != "never"
    assert rows[2][1] == "yes" and rows[2][3] == "never"
    assert secret not in listed.stdout and admin.stdout.strip() not in listed.stdout

    rotated = run_command("keys", "rotate", "alice")
    assert rotated.returncode == 0
    assert selectors.key_caller(secret=secret) is None
    assert selectors.key_caller(secret=rotated.stdout.strip()).name == "alice"

    revoked = run_command("keys", "revoke", "alice")
    assert revoked.returncode == 0
    assert selectors.key_caller(secret=rotated.stdout.strip()) is None
    assert run_command("keys", "list").stdout.splitlines()[1].split("\t")[6] != "-"


def test_create_says_on_stderr_whether_the_service_takes_keys_and_succeeds_either_way(
    keys_db: str,
) -> None:
    """API_KEYS as the command's environment has it (for scripts, as the service's own)."""
    off = run_command("keys", "create", "alice", env={"API_KEYS": "0", "MONGODB_URI": keys_db})
    assert off.returncode == 0
    assert off.stdout.count("\n") == 1 and off.stdout.startswith("igk_")  # the secret alone
    assert "warning: API_KEYS is off, so the service does not take named keys yet" in off.stderr
    on = run_command("keys", "create", "bob", env={"API_KEYS": "1", "MONGODB_URI": keys_db})
    assert on.returncode == 0 and on.stdout.count("\n") == 1
    assert "API_KEYS is on: the service takes it from the next request on" in on.stderr
    assert "warning" not in on.stderr


def test_the_command_refuses_clearly(keys_db: str) -> None:
    run_command("keys", "create", "alice")
    again = run_command("keys", "create", "alice")
    assert again.returncode == 2
    assert "name: a key named 'alice' exists" in again.stderr
    missing = run_command("keys", "revoke", "nobody")
    assert missing.returncode == 2 and "name: no live key named 'nobody'" in missing.stderr
    bad = run_command("keys", "create", "bob", "--max-queued", "0")
    assert bad.returncode == 2 and "--max-queued: must be at least 1" in bad.stderr


def test_last_used_is_written_at_most_once_a_minute(keys_db: str) -> None:
    issued = services.key_create(name="alice")
    recent = utc_now() - timedelta(seconds=30)
    keys_collection().update_one({}, {"$set": {"lastUsedAt": recent}})
    selectors.key_caller(secret=issued.secret)
    assert keys_collection().find_one()["lastUsedAt"] == recent
    stale = utc_now() - timedelta(minutes=2)
    keys_collection().update_one({}, {"$set": {"lastUsedAt": stale}})
    selectors.key_caller(secret=issued.secret)
    assert keys_collection().find_one()["lastUsedAt"] > recent


def test_a_key_without_limits_of_its_own_has_the_deployments_defaults(keys_db: str, settings):
    plain = services.key_create(name="plain").secret
    own = services.key_create(name="own", max_queued=1, per_minute=2).secret
    before = selectors.key_caller(secret=plain)
    assert (before.max_queued, before.per_minute) == (None, None)  # unset: no limit
    settings.KEY_DEFAULT_MAX_QUEUED, settings.KEY_DEFAULT_PER_MINUTE = 3, 10
    # Read at each request: a key made before the default was set has it too.
    assert selectors.key_caller(secret=plain).max_queued == 3
    assert selectors.key_caller(secret=plain).per_minute == 10
    assert selectors.key_caller(secret=own).max_queued == 1
    assert selectors.key_caller(secret=own).per_minute == 2
    made_after = services.key_create(name="after").secret
    assert selectors.key_caller(secret=made_after).max_queued == 3
