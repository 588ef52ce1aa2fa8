"""Step (a) of the gate against Azure Container Apps: the container must run the image's own
command. A command override (e.g. a placeholder static file server left in the template) is
read and removed with the `az` CLI, through its show / edit / `update --yaml` cycle, and the
step ends only when a new revision without it is the ready one. deploy/azure.sh uses the
same wait for the revision a deployment creates (`python -m imagegen.ops.platform`).

What the platform and the CLI do, and where that is written (docs/azure.md cites the same):
- `update --yaml` is a PATCH and the CLI drops null fields, so a field left out of the YAML
  can survive (microsoft/azure-container-apps#516): the override is cleared with explicit
  empty lists, which the CLI sends as they are since containerapp 0.3.29.
- `show` returns secrets by name only; an update must carry their values or the platform
  refuses it (`ContainerAppSecretInvalid`, Azure/azure-sdk-for-net#41244). The current CLI
  refills them itself through listSecrets, older ones do not, so the values are read with
  `show --show-secrets` (the same permission) and written to a private temporary file.
- A repeated revision suffix is refused, so the one `show` returned is dropped.
- Only template changes make a revision; until the new revision is ready the old one keeps
  serving ("zero downtime deployment"), so "the latest revision is the ready one" proves
  nothing by itself: the step waits for a revision other than the one before the update.
"""

import argparse
import copy
import itertools
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from imagegen.ops.gate import ExitCode, GateFailure

# Seconds for the platform step: the update, then a node start, a multi-GB image pull and
# the startup probe's window (5 minutes in deploy/containerapp.yaml) before the new revision
# is ready.
DEFAULT_TIMEOUT = 1200.0
DEFAULT_INTERVAL = 10.0


class Az:
    """Runs `az` within one deadline: each call gets the time left (at least a second), so
    a hung call ends the step as a PLATFORM failure at the step's timeout, not a traceback."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def __call__(self, *args: str) -> str:
        words = " ".join(itertools.takewhile(lambda a: not a.startswith("-"), args))
        try:
            done = subprocess.run(
                ["az", *args], capture_output=True, text=True, timeout=max(self.left(), 1.0)
            )
        except FileNotFoundError:
            raise GateFailure(ExitCode.PLATFORM, "the az CLI is not installed") from None
        except subprocess.TimeoutExpired:
            raise GateFailure(
                ExitCode.PLATFORM,
                f"az {words} did not answer within the platform step's {self.timeout:g}s",
            ) from None
        if done.returncode != 0:
            raise GateFailure(ExitCode.PLATFORM, f"az {words} failed: {done.stderr.strip()[:300]}")
        return done.stdout

    def json(self, *args: str) -> dict:
        return json.loads(self(*args, "--output", "json"))


def overrides(containers: list[dict]) -> list[dict]:
    """The containers whose command or args replace the image's own (empty lists do not)."""
    return [c for c in containers if c.get("command") or c.get("args")]


def described(container: dict) -> str:
    return " ".join([*(container.get("command") or []), *(container.get("args") or [])])


def read_with_secrets(az: Az, where: list[str]) -> dict:
    """The app with its secrets' values, which the update must carry back; refused (no
    listSecrets permission), nothing is changed and the message says why."""
    try:
        return az.json("containerapp", "show", *where, "--show-secrets")
    except GateFailure as failure:
        raise GateFailure(
            ExitCode.PLATFORM,
            f"cannot read the app's secret values ({failure}); the update must send them back, "
            "so this identity needs Microsoft.App/containerApps/listSecrets/action (e.g. "
            "Contributor on the app). Nothing was changed.",
        ) from None


def without_override(app: dict) -> dict:
    """The app as the update's YAML: command and args as explicit empty lists (a PATCH keeps
    a field left out, and the CLI drops nulls), and no revisionSuffix (the stored one is
    taken: the platform would refuse it; without one it names the new revision)."""
    spec = copy.deepcopy(app)
    template = spec["properties"]["template"]
    for container in template["containers"]:
        container["command"] = []
        container["args"] = []
    template.pop("revisionSuffix", None)
    return spec


def update(az: Az, where: list[str], spec: dict) -> None:
    """`az containerapp update --yaml` from a private temporary file (it holds secrets)."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as patched:  # mode 0600
        json.dump(spec, patched)  # JSON is YAML
        patched.flush()
        az("containerapp", "update", *where, "--yaml", patched.name, "--output", "none")


def ensure_image_command(
    app: str,
    resource_group: str,
    say: Callable[[str], None],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = DEFAULT_INTERVAL,
) -> bool:
    """Removes any command/args override from the app's containers and waits (the whole step
    within `timeout`) for a new revision without it to be ready; True if it removed one."""
    if shutil.which("az") is None:
        say("platform: the az CLI is not installed; skipping the platform check")
        return False
    az = Az(timeout)
    where = ["--name", app, "--resource-group", resource_group]
    shown = az.json("containerapp", "show", *where)
    overridden = overrides(shown["properties"]["template"]["containers"])
    if not overridden:
        say(f"platform: {app} runs the image's own command")
        return False
    for container in overridden:
        say(
            f"platform: container {container['name']} overrides the command with "
            f"{container.get('command')} {container.get('args') or ''}; removing it"
        )
    before = shown["properties"].get("latestRevisionName")
    update(az, where, without_override(read_with_secrets(az, where)))
    say(
        f"platform: override removed; waiting up to {timeout:g}s for a new revision "
        f"(the latest was {before}) to be ready"
    )
    wait_for_revision(az, where, f"a revision after {before}", lambda n: n != before, interval, say)
    return True


def wait_for_revision(
    az: Az,
    where: list[str],
    wanted: str,
    matches: Callable[[str], bool],
    interval: float,
    say: Callable[[str], None],
) -> str:
    """Until the app's latest revision `matches` and is the ready one (before that, the
    revision it replaces still answers at the app's address), then checks that it runs the
    image's own command; its name."""
    latest = None
    while True:
        properties = az.json("containerapp", "show", *where)["properties"]
        latest = properties.get("latestRevisionName")
        if latest and matches(latest) and properties.get("latestReadyRevisionName") == latest:
            check_template(az, where, latest)
            say(f"platform: revision {latest} is ready and runs the image's own command")
            return latest
        if az.left() <= 0:
            raise GateFailure(ExitCode.PLATFORM, not_ready(az, where, wanted, latest, matches))
        time.sleep(max(min(interval, az.left()), 0))


def check_template(az: Az, where: list[str], revision: str) -> None:
    """The revision's own template, not the app's: it is what the running container got."""
    shown = az.json("containerapp", "revision", "show", *where, "--revision", revision)
    overridden = overrides(shown["properties"]["template"]["containers"])
    if overridden:
        raise GateFailure(
            ExitCode.PLATFORM,
            f"revision {revision} is ready but still overrides the command: "
            + "; ".join(f"{c['name']}: {described(c)}" for c in overridden),
        )


def not_ready(
    az: Az, where: list[str], wanted: str, latest: str | None, matches: Callable[[str], bool]
) -> str:
    """The timeout's diagnosis: no such revision at all, or one that never became ready."""
    if not latest or not matches(latest):
        return (
            f"{wanted} did not appear within {az.timeout:g}s (the latest is still {latest}): "
            "the update changed nothing the platform counts as a template change"
        )
    try:
        state = az.json("containerapp", "revision", "show", *where, "--revision", latest)
        properties = state.get("properties") or {}
        details = f" ({properties.get('runningState')}: {properties.get('runningStateDetails')})"
    except GateFailure:
        details = ""
    return (
        f"the new revision {latest} did not become ready within {az.timeout:g}s{details}. "
        "It needs a free node of the workload profile while the old revision keeps its own "
        "(is --max-nodes at least 2? 'The workload profile has reached its maximum node "
        "count' in the system logs says not); ActivationFailed? see "
        "`az containerapp revision list` and the system logs"
    )


def main(argv: list[str] | None = None) -> int:
    """`python -m imagegen.ops.platform wait-for-revision ...`, for deploy/azure.sh."""
    parser = argparse.ArgumentParser(
        prog="python -m imagegen.ops.platform",
        description="Waits until REVISION is the app's ready revision and runs the image's "
        "own command (deploy/azure.sh deploy); exit 15 if not within --timeout.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    wait = commands.add_parser("wait-for-revision")
    wait.add_argument("--name", required=True)
    wait.add_argument("--resource-group", required=True)
    wait.add_argument("--revision", required=True)
    wait.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT)
    wait.add_argument("--interval", type=float, default=DEFAULT_INTERVAL)
    options = parser.parse_args(argv)

    def say(line: str) -> None:
        print(line, flush=True)

    where = ["--name", options.name, "--resource-group", options.resource_group]
    try:
        wait_for_revision(
            Az(options.timeout),
            where,
            f"revision {options.revision}",
            lambda name: name == options.revision,
            options.interval,
            say,
        )
    except GateFailure as failure:
        print(f"platform: FAILED: {failure}", file=sys.stderr)
        return failure.code
    return 0


if __name__ == "__main__":
    sys.exit(main())
