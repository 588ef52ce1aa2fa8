"""The forms of ids read back from a store before they name a file.

So a forged job in Redis cannot make a worker read or write outside the image store."""

import re

# A job's id is 16 hex digits (secrets.token_hex(8)). Read back, it must at least be safe as a path,
# a Redis key pattern and a log field.
JOB_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")  # an edit's input, stored under its digest
# A named key's name (apikeys.services.NAME_RULE, 64 at most) or API_TOKEN's.
KEY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def is_job_id(value: str) -> bool:
    return bool(JOB_ID.fullmatch(value))


def is_digest(value: str) -> bool:
    return bool(SHA256.fullmatch(value))


def is_key_name(value: str) -> bool:
    return bool(KEY_NAME.fullmatch(value))
