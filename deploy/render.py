"""Fills deploy/containerapp.yaml's ${NAME} placeholders from the environment, each value
JSON-quoted (a JSON string is a YAML string), so secrets with `#`, `:` or `&` stay intact."""

import json
import os
import string
import sys


def render(template: str, env: dict[str, str]) -> str:
    quoted = {name: json.dumps(value) for name, value in env.items()}
    return string.Template(template).substitute(quoted)


if __name__ == "__main__":
    sys.stdout.write(render(sys.stdin.read(), dict(os.environ)))
