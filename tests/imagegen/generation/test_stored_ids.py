"""The forms a worker holds ids read from Redis to (imagegen/generation/stored_ids.py): a
trailing newline, which `$` lets through, makes no id, digest or key name."""

import pytest

from imagegen.generation.stored_ids import is_digest, is_job_id, is_key_name


@pytest.mark.parametrize(
    ("check", "good"),
    [(is_job_id, "0123456789abcdef"), (is_digest, "a" * 64), (is_key_name, "alice")],
)
def test_a_trailing_newline_or_a_path_makes_no_stored_id(check, good: str) -> None:
    assert check(good)
    for forged in (good + "\n", "../" + good, good + "/x", ""):
        assert not check(forged), forged
