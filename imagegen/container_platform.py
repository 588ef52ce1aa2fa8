"""Step (a) of the gate against Azure Container Apps: the container must run the image's own
command. A command override (e.g. a placeholder static file server left in the template) is
read and removed with the `az` CLI, using its documented show / edit / `update --yaml` cycle.
"""

import json
import shutil
import subprocess
import tempfile
from collections.abc import Callable

from imagegen.gate import ExitCode, GateFailure


def _az(*args: str) -> str:
    try:
        done = subprocess.run(["az", *args], capture_output=True, text=True, timeout=600)
    except FileNotFoundError:
        raise GateFailure(ExitCode.PLATFORM, "the az CLI is not installed") from None
    if done.returncode != 0:
        raise GateFailure(
            ExitCode.PLATFORM, f"az {args[0]} {args[1]} failed: {done.stderr.strip()[:300]}"
        )
    return done.stdout


def ensure_image_command(app: str, resource_group: str, say: Callable[[str], None]) -> bool:
    """Removes any command/args override from the app's containers; True if it removed one."""
    if shutil.which("az") is None:
        raise GateFailure(ExitCode.PLATFORM, "the az CLI is not installed")
    where = ["--name", app, "--resource-group", resource_group]
    spec = json.loads(_az("containerapp", "show", *where, "--output", "json"))
    containers = spec["properties"]["template"]["containers"]
    overridden = [c for c in containers if c.get("command") or c.get("args")]
    if not overridden:
        say(f"platform: {app} runs the image's own command")
        return False
    for container in overridden:
        say(
            f"platform: container {container['name']} overrides the command with "
            f"{container.get('command')} {container.get('args') or ''}; removing it"
        )
        container.pop("command", None)
        container.pop("args", None)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as patched:
        json.dump(spec, patched)  # JSON is YAML
        patched.flush()
        _az("containerapp", "update", *where, "--yaml", patched.name, "--output", "none")
    say("platform: override removed; a new revision starts with the image's command")
    return True
