"""Fills deploy/containerapp.yaml's ${NAME} placeholders from the environment, each value
JSON-quoted (a JSON string is a YAML string), so secrets with `#`, `:` or `&` stay intact.

The sizing settings have defaults (the seed's reference: the whole D4 node), so the same
template serves the memory-optimised fallback (docs/azure.md)
by settings alone. CPU is the one number: it is checked and written bare, since the platform
reads `cpu` as a number.

    python3 deploy/render.py < deploy/containerapp.yaml > spec.yaml
    python3 deploy/render.py --new-revision-suffix     # prints a fresh revision suffix
"""

import json
import os
import re
import secrets
import string
import sys
import time

DEFAULTS = {
    "WORKLOAD_PROFILE_NAME": "d4", "CPU": "4", "MEMORY": "16Gi",
    # The distributed layout's web app: the consumption plan (it never loads the model;
    # 2 vCPU give the replica room on local disk for the largest file of a pull in flight).
    "WEB_WORKLOAD_PROFILE_NAME": "Consumption", "WEB_CPU": "2", "WEB_MEMORY": "4Gi",
    "WEB_MAX_REPLICAS": "3", "WORKER_MAX_REPLICAS": "2",
}  # fmt: skip
NUMBERS = {"CPU", "WEB_CPU", "WEB_MAX_REPLICAS", "WORKER_MAX_REPLICAS"}
NUMBER = re.compile(r"\d+(\.\d+)?")


def new_revision_suffix(now: float | None = None) -> str:
    """A suffix no earlier deployment used (UTC time and 32 random bits: 16 bits let 50
    suffixes drawn in one second collide about once in 50 draws): the platform
    refuses a repeated one, and a new suffix alone makes a new revision. Lowercase letters,
    digits and single dashes, starting with a letter: the platform's rules for a suffix."""
    return "d" + time.strftime("%Y%m%d-%H%M%S", time.gmtime(now)) + "-" + secrets.token_hex(4)


def quoted(name: str, value: str) -> str:
    """A value as YAML: numbers bare (and checked), everything else a JSON string."""
    if name not in NUMBERS:
        return json.dumps(value)
    if not NUMBER.fullmatch(value):
        raise ValueError(f"{name} must be a number such as 4 or 3.5, not {value!r}")
    return value


def render(template: str, env: dict[str, str]) -> str:
    settings = {**DEFAULTS, "REVISION_SUFFIX": new_revision_suffix(), **env}
    return string.Template(template).substitute(
        {name: quoted(name, value) for name, value in settings.items()}
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["--new-revision-suffix"]:
        print(new_revision_suffix())
    else:
        sys.stdout.write(render(sys.stdin.read(), dict(os.environ)))
