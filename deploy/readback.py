"""Reads back what the platform stored after `az containerapp create|update --yaml` and stops
the deployment when a field of the spec is missing from it.

The CLI reads the YAML through its own models and silently drops what they do not know
(`workloadProfileName` before Azure/azure-cli-extensions#6194; a volume's `mountOptions`
before containerapp 0.3.34). Without the profile the app lands on the consumption plan; without
the mount options the share is mounted with the wrong owner. So these fields are compared
with the spec, not trusted.

    az containerapp show ... --output json | python3 deploy/readback.py SPEC.yaml

Standard library only: the two fields are read from the rendered spec's own lines (the
template is ours; a test holds this reading equal to a YAML parser's).
"""

import json
import re
import sys

PROFILE = re.compile(r"^  workloadProfileName: (.+)$", re.M)
VOLUME = re.compile(r"^      - name: (\S+)\n(?:        .*\n)*?        mountOptions: (\S+)$", re.M)


def expected(spec: str) -> dict:
    """The workload profile and each volume's mount options, from the rendered spec."""
    profile = PROFILE.search(spec)
    return {
        "workloadProfileName": json.loads(profile.group(1)) if profile else None,
        "mountOptions": dict(VOLUME.findall(spec)),
    }


def missing(spec: str, stored: dict) -> list[str]:
    """What the stored app lacks or holds differently, one phrase each."""
    want = expected(spec)
    properties = stored.get("properties") or {}
    problems = []
    if properties.get("workloadProfileName") != want["workloadProfileName"]:
        problems.append(
            f"workloadProfileName is {properties.get('workloadProfileName')!r}, "
            f"not {want['workloadProfileName']!r}"
        )
    volumes = {v.get("name"): v for v in (properties.get("template") or {}).get("volumes") or []}
    for name, options in want["mountOptions"].items():
        got = (volumes.get(name) or {}).get("mountOptions")
        if got != options:
            problems.append(f"volume {name} has mountOptions {got!r}, not {options!r}")
    return problems


def main() -> int:
    with open(sys.argv[1]) as spec:
        problems = missing(spec.read(), json.load(sys.stdin))
    if problems:
        print(
            "deploy: STOPPED: the platform did not store the spec: "
            + "; ".join(problems)
            + ". The az CLI drops YAML fields its models do not know: upgrade it "
            "(`az upgrade`; `az extension update --name containerapp` if that extension is "
            "installed) and deploy again.",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
