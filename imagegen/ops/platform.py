"""Step (a) of the gate against Azure Container Apps: the container must run the image's own
command. A command override (e.g. a placeholder static file server left in the template) is
read and removed with the `az` CLI, using its documented show / edit / `update --yaml` cycle.
"""

import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable

from imagegen.ops.gate import ExitCode, GateFailure


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


def _show(where: list[str]) -> dict:
    return json.loads(_az("containerapp", "show", *where, "--output", "json"))


def ensure_image_command(
    app: str, resource_group: str, say: Callable[[str], None], *, timeout: float
) -> bool:
    """Removes any command/args override from the app's containers and waits (up to
    `timeout`) for the new revision to be ready; True if it removed one."""
    if shutil.which("az") is None:
        say("platform: the az CLI is not installed; skipping the platform check")
        return False
    where = ["--name", app, "--resource-group", resource_group]
    spec = _show(where)
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
    say("platform: override removed; waiting for the new revision to be ready")
    wait_for_latest_revision(where, timeout)
    return True


def wait_for_latest_revision(where: list[str], timeout: float) -> None:
    """Until the latest revision is the ready one: before that, the old (placeholder)
    revision still answers at the app's address."""
    deadline = time.monotonic() + timeout
    while True:
        properties = _show(where)["properties"]
        latest = properties.get("latestRevisionName")
        if latest and latest == properties.get("latestReadyRevisionName"):
            return
        if time.monotonic() >= deadline:
            raise GateFailure(
                ExitCode.PLATFORM,
                f"the new revision {latest} did not become ready within {timeout:g}s "
                "(ActivationFailed? see `az containerapp revision list`)",
            )
        time.sleep(5)
