"""The forms of the names the service gives things that end up in file names and store keys:
a job's id, an input's sha256, an API key's name. What comes back from a store another
process writes (Redis, in distributed mode) is checked against them before it names a file,
so a forged job cannot make a worker read or write outside the image store."""

import re

# A job's id: the service makes 16 hex digits (secrets.token_hex(8)); read back, it must at
# least be a name that no path, Redis key pattern or log line can be made of.
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
