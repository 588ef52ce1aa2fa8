"""The fake `az`: the one stand-in for the Azure CLI and the Container Apps control plane
(nothing here reaches Azure). `FakeAz(tmp_path)` writes `bin/az`, which runs this file with
the test's state directory; the test puts `bin` first on PATH and scripts the control plane
through `state.json`. Every call is logged (`calls()`), every YAML sent kept (`applied()`).

It behaves as the Container Apps documentation, the CLI's source and the issue trackers say,
and where they are silent it takes the pessimistic reading:

- `containerapp update --yaml` is a PATCH: a field left out of the YAML keeps its stored
  value, containers matched by name (microsoft/azure-container-apps#516); an explicit empty
  list clears. The CLI drops nulls first (azure-cli containerapp `clean_null_values`, which
  keeps empty lists since containerapp 0.3.29; `cli.drops_empty_lists` is an older CLI).
- The CLI reads the YAML through its models: read-only fields go, and so, silently, do the
  fields in `cli.unknown_fields` (`workloadProfileName` before azure-cli-extensions#6194,
  `mountOptions` before containerapp 0.3.34). An app created without a profile lands on
  Consumption (the RP's default).
- `show` gives secrets by name only; `--show-secrets` adds the values through listSecrets,
  which `identity.can_list_secrets` may deny. The current CLI's `update --yaml` lists the
  secrets too and refills missing values (`cli.refills_secrets`); an update whose secrets
  still lack values is refused (ContainerAppSecretInvalid, Azure/azure-sdk-for-net#41244).
- Only a template change (revisionSuffix included) makes a revision; a secret change does
  not, and a revision keeps the secret values it started with ("Manage secrets"). A repeated
  revisionSuffix is refused.
- A revision needs nodes of its workload profile: per node, as many replicas as the
  profile's size less `reserve` holds; in single revision mode the old revision keeps its
  node until the new one is ready ("Zero downtime deployment"). One that does not fit stays
  Activating ("The workload profile has reached its maximum node count",
  microsoft/azure-container-apps#1521); one that fits is ready after `ready_after_polls`
  looks at the app (a node start, the image pull, the startup probe).
- `az version` answers `az_version`; the commands in `hang` never answer.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import re
import sys
import time
from pathlib import Path

# Dedicated profiles: vCPU and GiB per node (Container Apps docs, "Workload profiles":
# D4-D32 general purpose, 4-32 vCPU / 16-128 GiB; E4-E32 memory optimised, 32-256 GiB).
PROFILE_SIZES = {
    "D4": (4, 16), "D8": (8, 32), "D16": (16, 64), "D32": (32, 128),
    "E4": (4, 32), "E8": (8, 64), "E16": (16, 128), "E32": (32, 256),
}  # fmt: skip
CONSUMPTION_REPLICA = (4, 8)  # the consumption plan's largest replica
MAXIMUM_NODE_COUNT = "The workload profile has reached its maximum node count."
READ_ONLY = {
    "provisioningState", "latestRevisionName", "latestReadyRevisionName",
    "latestRevisionFqdn", "outboundIpAddresses", "customDomainVerificationId",
    "eventStreamEndpoint", "runningStatus",
}  # fmt: skip

DEFAULT_STATE = {
    "az_version": {
        "azure-cli": "2.61.0",
        "azure-cli-core": "2.61.0",
        "azure-cli-telemetry": "1.1.0",
        "extensions": {},
    },
    "cli": {"unknown_fields": [], "drops_empty_lists": False, "refills_secrets": True},
    "identity": {"can_list_secrets": True},
    "hang": [],
    "ready_after_polls": 0,
    "reserve": {"cpu": 0.0, "memory_gib": 0.0},
    "concurrent_override": None,
    "environment": None,
    "images": {},
    "apps": {},
    "revisions": {},
    "applied": [],
    "counter": 0,
}


class Refused(Exception):
    """What az prints as an error, with its exit status (3: not found)."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


# -- the test's side ------------------------------------------------------------------------


class FakeAz:
    """A fake `az` on PATH for one test, with its control plane in `directory/az-state`."""

    def __init__(self, directory: Path, **state) -> None:
        self.bin = directory / "bin"
        self.dir = directory / "az-state"
        self.bin.mkdir(parents=True)
        self.dir.mkdir(parents=True)
        az = self.bin / "az"
        az.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{__file__}" "{self.dir}" "$@"\n')
        az.chmod(0o755)
        self.save({**copy.deepcopy(DEFAULT_STATE), **state})

    @property
    def env(self) -> dict[str, str]:
        return {"PATH": f"{self.bin}:{os.environ['PATH']}"}

    def state(self) -> dict:
        return json.loads((self.dir / "state.json").read_text())

    def save(self, state: dict) -> None:
        (self.dir / "state.json").write_text(json.dumps(state, indent=1))

    def set(self, **changes) -> None:
        self.save({**self.state(), **changes})

    def calls(self) -> list[str]:
        log = self.dir / "calls.log"
        return log.read_text().splitlines() if log.exists() else []

    def applied(self) -> list[dict]:
        """Each YAML sent with create/update --yaml: {"command", "mode", "spec"}."""
        return self.state()["applied"]

    def seed_app(self, spec: dict, *, name: str = "imagegen") -> None:
        """An app already deployed from `spec` (a create, with its profile), ready."""
        state = self.state()
        if state["environment"] is None:
            state["environment"] = environment("rg", "imagegen-env")
            state["environment"]["profiles"]["d4"] = {"type": "D4", "min": 1, "max": 2}
        create_app(state, name, copy.deepcopy(spec))
        tick(state, name)
        self.save(state)

    def latest_revision(self, app: str = "imagegen") -> dict:
        state = self.state()
        return state["revisions"][state["apps"][app]["properties"]["latestRevisionName"]]


# -- the CLI's side ---------------------------------------------------------------------------


def parse(argv: list[str]) -> tuple[str, dict, list[str]]:
    """The command words, the --options (a flag is True) and stray positionals."""
    words = []
    while argv and not argv[0].startswith("-"):
        words.append(argv.pop(0))
    options, rest = {}, []
    while argv:
        arg = argv.pop(0)
        if not arg.startswith("-"):
            rest.append(arg)
        elif argv and not argv[0].startswith("--"):
            options[arg] = argv.pop(0)
        else:
            options[arg] = True
    return " ".join(words), options, rest


TOKEN = re.compile(r'"([^"]*)"|([A-Za-z_]\w*)|\[(\d+)\]|\.')


def query(value, expression: str):
    """The JMESPath subset the scripts use: names, "quoted names", [index]."""
    position = 0
    while position < len(expression):
        match = TOKEN.match(expression, position)
        if match is None:
            raise Refused(f"fake az: unsupported --query {expression!r}")
        position = match.end()
        quoted, name, index = match.groups()
        key = quoted if quoted is not None else name
        if key is not None:
            value = value.get(key) if isinstance(value, dict) else None
        elif index is not None:
            listed = value if isinstance(value, list) else []
            value = listed[int(index)] if int(index) < len(listed) else None
    return value


def emit(value, options: dict) -> None:
    if "--query" in options:
        value = query(value, options["--query"])
    output = options.get("--output", "json")
    if output == "none" or (output == "tsv" and value is None):
        return
    if output == "tsv":
        print("\t".join(map(str, value)) if isinstance(value, list) else value)
    else:
        print(json.dumps(value, indent=2))


def environment(resource_group: str, name: str) -> dict:
    return {
        "name": name,
        "id": f"/subscriptions/0000/resourceGroups/{resource_group}/providers/"
        f"Microsoft.App/managedEnvironments/{name}",
        "profiles": {"Consumption": {"type": "Consumption"}},
        "storages": {},
    }


def without_nulls(value, *, keep_empty_lists: bool):
    """The CLI's clean-up before a PATCH: nulls go (and, in an old CLI, empty lists)."""
    if isinstance(value, dict):
        cleaned = {k: without_nulls(v, keep_empty_lists=keep_empty_lists) for k, v in value.items()}
        return {
            k: v
            for k, v in cleaned.items()
            if v is not None and (v != [] or keep_empty_lists) and v != {}
        }
    if isinstance(value, list):
        return [without_nulls(v, keep_empty_lists=keep_empty_lists) for v in value]
    return value


def without_fields(value, fields: set[str]):
    """What a CLI whose models lack `fields` keeps of the YAML: everything else."""
    if isinstance(value, dict):
        return {k: without_fields(v, fields) for k, v in value.items() if k not in fields}
    if isinstance(value, list):
        return [without_fields(v, fields) for v in value]
    return value


def cli_reads(path: str, state: dict, command: str) -> dict:
    """The YAML as the CLI sends it, and a record of the file (mode included)."""
    import yaml

    text = Path(path).read_text()
    state["applied"].append(
        {
            "command": command,
            "mode": oct(os.stat(path).st_mode & 0o777),
            "spec": yaml.safe_load(text),
        }
    )
    cli = state["cli"]
    spec = without_fields(yaml.safe_load(text), set(cli["unknown_fields"]))
    spec = without_nulls(spec, keep_empty_lists=not cli["drops_empty_lists"])
    for field in ("id", "systemData"):
        spec.pop(field, None)
    properties = spec.setdefault("properties", {})
    for field in READ_ONLY:
        properties.pop(field, None)
    ((properties.get("configuration") or {}).get("ingress") or {}).pop("fqdn", None)
    return spec


def patch(stored: dict, body: dict) -> None:
    """A PATCH: what the body leaves out stays; containers are matched by name."""
    for key, value in body.items():
        if key == "containers" and isinstance(stored.get(key), list):
            old = {c.get("name"): c for c in stored[key]}
            merged = []
            for container in value:
                one = copy.deepcopy(old.get(container.get("name"), {}))
                patch(one, container)
                merged.append(one)
            stored[key] = merged
        elif isinstance(value, dict) and isinstance(stored.get(key), dict):
            patch(stored[key], value)
        else:
            stored[key] = copy.deepcopy(value)


def check_secrets(properties: dict) -> None:
    secrets = (properties.get("configuration") or {}).get("secrets") or []
    lacking = [s["name"] for s in secrets if not s.get("value") and not s.get("keyVaultUrl")]
    if lacking:
        raise Refused(
            f"(ContainerAppSecretInvalid) Container app secret(s) with name(s) "
            f"'{', '.join(lacking)}' are invalid: value or keyVaultUrl and identity should be "
            "provided."
        )


def check_profile(properties: dict, state: dict) -> None:
    profiles = (state["environment"] or {}).get("profiles", {})
    if properties.get("workloadProfileName") not in profiles:
        raise Refused(f"(WorkloadProfileNotFound) {properties.get('workloadProfileName')}")


def check_suffix(state: dict, app: str, suffix: str | None) -> None:
    if suffix and f"{app}--{suffix}" in state["revisions"]:
        raise Refused(
            "Field 'template.revisionsuffix' is invalid with details: 'Invalid value: "
            f'"{suffix}": revision with suffix {suffix} already exists'
        )


def template_of(properties: dict) -> dict:
    template = copy.deepcopy(properties["template"])
    template.pop("revisionSuffix", None)
    return template


def new_revision(state: dict, app: str, suffix: str | None) -> str:
    """A revision of the app's current template and secrets, not yet placed. In single
    revision mode it supersedes a revision still on its way up (that one is deactivated)."""
    for revision in state["revisions"].values():
        if revision["app"] == app and revision["active"] and not revision["ready"]:
            revision["active"] = False
    state["counter"] += 1
    properties = state["apps"][app]["properties"]
    name = f"{app}--{suffix}" if suffix else f"{app}--r{state['counter']:06d}"
    secrets = (properties.get("configuration") or {}).get("secrets") or []
    state["revisions"][name] = {
        "app": app,
        "created": state["counter"],
        "template": template_of(properties),
        "secrets": {s["name"]: s.get("value") for s in secrets},
        "active": True,
        "ready": False,
        "polls": 0,
        "runningState": "Activating",
        "runningStateDetails": None,
    }
    properties["latestRevisionName"] = name
    return name


def create_app(state: dict, name: str, spec: dict) -> None:
    properties = spec.setdefault("properties", {})
    properties.setdefault("workloadProfileName", "Consumption")
    suffix = properties["template"].get("revisionSuffix")
    check_suffix(state, name, suffix)
    check_secrets(properties)
    check_profile(properties, state)
    properties["provisioningState"] = "Succeeded"
    properties["configuration"].setdefault("ingress", {})["fqdn"] = f"{name}.example.io"
    state["apps"][name] = {"name": name, "type": "Microsoft.App/containerApps", **spec}
    new_revision(state, name, suffix)


def update_app(state: dict, name: str, body: dict) -> None:
    app = state["apps"][name]
    template = (body.get("properties") or {}).get("template") or {}
    suffix = template.get("revisionSuffix")
    check_suffix(state, name, suffix)
    properties = copy.deepcopy(app["properties"])
    patch(properties, body.get("properties") or {})
    properties["template"].pop("revisionSuffix", None)  # the CLI sends null when absent
    if suffix:
        properties["template"]["revisionSuffix"] = suffix
    check_secrets(properties)
    check_profile(properties, state)
    changed = template_of(properties) != template_of(app["properties"])
    app["properties"] = properties
    if suffix or changed:
        new_revision(state, name, suffix)
    if state["concurrent_override"]:  # another deployment puts an override back
        for container in properties["template"]["containers"]:
            container["command"] = state["concurrent_override"]
        new_revision(state, name, None)


def refill_secrets(state: dict, name: str, body: dict) -> None:
    """The current CLI lists the secrets on every `update --yaml` and fills in the values."""
    if not state["cli"]["refills_secrets"]:
        return
    list_secrets(state)
    stored = state["apps"][name]["properties"].get("configuration", {}).get("secrets") or []
    values = {s["name"]: s.get("value") for s in stored}
    for secret in (body.get("properties", {}).get("configuration") or {}).get("secrets") or []:
        if "value" not in secret and "keyVaultUrl" not in secret:
            secret["value"] = values.get(secret["name"])


def list_secrets(state: dict) -> None:
    if not state["identity"]["can_list_secrets"]:
        raise Refused(
            "(AuthorizationFailed) The client does not have authorization to perform action "
            "'Microsoft.App/containerApps/listSecrets/action'"
        )


def gib(memory: str) -> float:
    number = float(re.match(r"[\d.]+", memory).group(0))
    return number / 1024 if memory.endswith("Mi") else number


def replicas_per_node(profile: dict, cpu: float, memory: float, reserve: dict) -> int:
    """How many replicas of this size one node of the profile holds."""
    if profile["type"] == "Consumption":
        largest_cpu, largest_memory = CONSUMPTION_REPLICA
        return 10**6 if cpu <= largest_cpu and memory <= largest_memory else 0
    node_cpu, node_memory = PROFILE_SIZES[profile["type"]]
    fits_cpu = (node_cpu - reserve["cpu"]) / cpu
    fits_memory = (node_memory - reserve["memory_gib"]) / memory
    return max(0, math.floor(min(fits_cpu, fits_memory) + 1e-9))


def nodes_needed(revision: dict, profile: dict, reserve: dict) -> float:
    containers = revision["template"]["containers"]
    cpu = sum(float(c["resources"]["cpu"]) for c in containers)
    memory = sum(gib(c["resources"]["memory"]) for c in containers)
    replicas = (revision["template"].get("scale") or {}).get("minReplicas", 1)
    per_node = replicas_per_node(profile, cpu, memory, reserve)
    return math.inf if per_node == 0 else math.ceil(replicas / per_node)


def tick(state: dict, name: str) -> None:
    """One look at the app: active revisions take nodes, oldest first; those with room get
    closer to ready; once the latest is ready, the others are deactivated."""
    properties = state["apps"][name]["properties"]
    profile = state["environment"]["profiles"][properties["workloadProfileName"]]
    limit = profile.get("max", math.inf)
    revisions = sorted(
        (r for r in state["revisions"].values() if r["app"] == name and r["active"]),
        key=lambda r: r["created"],
    )
    used = 0
    for revision in revisions:
        need = nodes_needed(revision, profile, state["reserve"])
        if used + need > limit:
            revision["runningStateDetails"] = MAXIMUM_NODE_COUNT
            continue
        used += need
        revision["polls"] += 1
        if not revision["ready"] and revision["polls"] > state["ready_after_polls"]:
            revision.update(ready=True, runningState="Running", runningStateDetails=None)
    latest = state["revisions"][properties["latestRevisionName"]]
    if latest["ready"]:
        for revision in revisions:
            revision["active"] = revision is latest
    ready = [r for r, v in state["revisions"].items() if v["app"] == name and v["ready"]]
    if ready:
        properties["latestReadyRevisionName"] = max(
            ready, key=lambda r: state["revisions"][r]["created"]
        )


def app_view(state: dict, name: str, with_secrets: bool) -> dict:
    view = copy.deepcopy(state["apps"][name])
    secrets = (view["properties"].get("configuration") or {}).get("secrets") or []
    if with_secrets:
        list_secrets(state)
    else:
        for secret in secrets:
            secret.pop("value", None)
    view["id"] = f"{state['environment']['id'].rsplit('/', 2)[0]}/containerApps/{name}"
    return view


def app_named(state: dict, options: dict) -> str:
    name = options["--name"]
    if name not in state["apps"]:
        raise Refused(f"(ResourceNotFound) The Resource 'Microsoft.App/containerApps/{name}' "
                      "was not found.", 3)  # fmt: skip
    return name


def run(command: str, options: dict, state: dict) -> None:
    """One az command against the state; one branch a command."""
    if command in state["hang"]:
        time.sleep(3600)
    if command == "version":
        emit(state["az_version"], options)
    elif command == "containerapp env create":
        state["environment"] = environment(options["--resource-group"], options["--name"])
        if subnet := options.get("--infrastructure-subnet-resource-id"):
            network = {"vnetConfiguration": {"infrastructureSubnetId": subnet}}
            state["environment"]["properties"] = network
    elif command == "network vnet subnet create":
        subnet_id = (f"/subscriptions/0000/resourceGroups/{options['--resource-group']}/providers/"
                     f"Microsoft.Network/virtualNetworks/{options['--vnet-name']}/subnets/"
                     f"{options['--name']}")  # fmt: skip
        state.setdefault("subnets", {})[subnet_id] = options["--address-prefixes"]
    elif command == "network vnet subnet show":
        subnets = state.get("subnets", {})
        subnet_id = options.get("--ids") or next(
            i
            for i in subnets
            if i.endswith(f"/{options['--vnet-name']}/subnets/{options['--name']}")
        )
        emit({"id": subnet_id, "addressPrefix": subnets[subnet_id]}, options)
    elif command == "containerapp env workload-profile add":
        state["environment"]["profiles"][options["--workload-profile-name"]] = {
            "type": options["--workload-profile-type"],
            "min": int(options["--min-nodes"]),
            "max": int(options["--max-nodes"]),
        }
    elif command == "containerapp env storage set":
        state["environment"]["storages"][options["--storage-name"]] = options["--access-mode"]
    elif command == "containerapp env show":
        emit(state["environment"], options)
    elif command == "storage account keys list":
        emit([{"keyName": "key1", "value": "fake-storage-key"}], options)
    elif command == "acr show":
        emit({"name": options["--name"], "loginServer": f"{options['--name']}.azurecr.io"}, options)
    elif command == "acr credential show":
        password = [{"name": "password", "value": "fake-registry-password"}]
        emit({"username": options["--name"], "passwords": password}, options)
    elif command == "acr build":
        state["counter"] += 1
        digest = hashlib.sha256(f"{options['--image']}{state['counter']}".encode()).hexdigest()
        state["images"][options["--image"]] = f"sha256:{digest}"
        print(f"Run ID: ca{state['counter']} was successful")
    elif command == "acr repository show":
        if options["--image"] not in state["images"]:
            raise Refused(f"(ResourceNotFound) {options['--image']}: manifest unknown", 3)
        emit({"name": options["--image"], "digest": state["images"][options["--image"]]}, options)
    elif command == "containerapp show":
        name = app_named(state, options)
        tick(state, name)
        emit(app_view(state, name, "--show-secrets" in options), options)
    elif command == "containerapp create":
        spec = cli_reads(options["--yaml"], state, command)
        create_app(state, options["--name"], spec)
    elif command == "containerapp update":
        name = app_named(state, options)
        body = cli_reads(options["--yaml"], state, command)
        refill_secrets(state, name, body)
        update_app(state, name, body)
    elif command == "containerapp revision show":
        app_named(state, options)
        revision = state["revisions"][options["--revision"]]
        properties = {k: revision[k] for k in ("template", "active", "runningState")}
        properties["runningStateDetails"] = revision["runningStateDetails"]
        emit({"name": options["--revision"], "properties": properties}, options)
    elif command == "redis show":
        host = f"{options['--name']}.redis.cache.windows.net"
        emit({"name": options["--name"], "hostName": host, "sslPort": 6380}, options)
    elif command == "redis list-keys":
        emit({"primaryKey": "fake/redis+key=", "secondaryKey": "other"}, options)
    # group, registry, storage, network and Redis creation: recorded in calls.log, nothing to
    # answer


def main(directory: str, argv: list[str]) -> int:
    state_file = Path(directory) / "state.json"
    with open(Path(directory) / "calls.log", "a") as log:
        log.write(" ".join(argv) + "\n")
    state = json.loads(state_file.read_text())
    command, options, _ = parse(list(argv))
    try:
        run(command, options, state)
    except Refused as refused:
        state_file.write_text(json.dumps(state, indent=1))
        print(f"ERROR: {refused}", file=sys.stderr)
        return refused.status
    state_file.write_text(json.dumps(state, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
