"""The Azure side, against the fake `az` (tests/support/fake_az.py), which behaves as the
Container Apps docs and the CLI's source say: the gate's platform step (manage.py gate
--container-app) and deploy/azure.sh (provision, image, deploy) run as an operator runs them.
"""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from urllib.parse import unquote, urlsplit

import pytest
import yaml

from imagegen.ops.platform import DEFAULT_TIMEOUT
from tests.support.commands import Result, run_command
from tests.support.fake_az import PROFILE_SIZES, FakeAz, replicas_per_node
from tests.support.keda import RedisListScaler
from tests.support.processes import ROOT
from tests.support.scripted_service import Reply, ScriptedService, model_state


def deploy_module(name: str):
    """deploy/NAME.py, which is a script directory, not a package."""
    spec = importlib.util.spec_from_file_location(f"deploy_{name}", ROOT / "deploy" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render = deploy_module("render")
readback = deploy_module("readback")
TEMPLATE = (ROOT / "deploy" / "containerapp.yaml").read_text()
SETTINGS = {
    "LOCATION": "westeurope",
    "APP_NAME": "imagegen",
    "ENVIRONMENT_ID": "/subscriptions/0000/resourceGroups/rg/providers/Microsoft.App/"
    "managedEnvironments/imagegen-env",
    "IMAGE": "imagegenacr.azurecr.io/imagegen@sha256:" + "0" * 64,
    "SECRET_KEY": "secret-key-value",
    "API_TOKEN": "token-value",
    "MONGODB_URI": "mongodb://db.example/todos",
    "MODEL_ID": "stabilityai/stable-diffusion-xl-base-1.0",
    "REGISTRY_SERVER": "imagegenacr.azurecr.io",
    "REGISTRY_USERNAME": "imagegenacr",
    "REGISTRY_PASSWORD": "registry-password",
    "REVISION_SUFFIX": "d20240101-000000-0000",
    "TRUSTED_PROXIES": "10.42.0.0/23",
}


def deployed_spec(command: list[str] | None = None, **settings: str) -> dict:
    """The app as deploy/azure.sh renders it, optionally with a command override."""
    spec = yaml.safe_load(render.render(TEMPLATE, {**SETTINGS, **settings}))
    if command:
        spec["properties"]["template"]["containers"][0]["command"] = command
    return spec


# -- the gate's platform step ---------------------------------------------------------------

PLATFORM = ["--container-app", "imagegen", "--resource-group", "rg"]
FAST = ["--interval", "0.2", "--health-timeout", "20", "--timeout", "60"]
PLACEHOLDER = ["python", "-m", "http.server", "8000"]
READY_SERVICE = {
    "GET /health": [Reply(200, {"status": "healthy"})],
    "POST /model/pull": [model_state("downloading", status=202)],
    "GET /model/status": [model_state("ready")],
}


@pytest.fixture
def fake(tmp_path) -> FakeAz:
    return FakeAz(tmp_path)


@pytest.fixture
def service():
    """A healthy service that loads at once: these tests are about the platform step."""
    with ScriptedService(READY_SERVICE) as scripted:
        yield scripted


def gate(base_url: str, fake: FakeAz, *extra: str) -> Result:
    """manage.py gate with the platform step, run in this process (run_command answers what
    the process would); the fake `az` it calls is a process of its own, as the real one is."""
    return run_command("gate", "--base-url", base_url, *FAST, *PLATFORM, *extra, env=fake.env)


def assert_platform_failure(result: Result, text: str) -> None:
    assert result.returncode == 15, (result.stdout, result.stderr)
    assert result.stderr.startswith("gate: FAILED: ") and text in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr  # no traceback


def test_fake_az_control_plane_command_override_is_removed(service, fake):
    fake.seed_app(deployed_spec(PLACEHOLDER))
    result = gate(service.base_url, fake, "--platform-timeout", "60")
    assert result.returncode == 0, result.stderr
    assert "overrides the command" in result.stdout
    (applied,) = fake.applied()
    template = applied["spec"]["properties"]["template"]
    container = template["containers"][0]
    # Cleared explicitly: the update is a PATCH, a field left out would survive.
    assert container["command"] == [] and container["args"] == []
    assert container["image"] == SETTINGS["IMAGE"]
    assert "revisionSuffix" not in template  # the stored one would be refused as repeated
    calls = fake.calls()
    show = "containerapp show --name imagegen --resource-group rg --output json"
    assert calls[0] == show
    assert calls[1] == show.replace("--output json", "--show-secrets --output json")
    assert calls[2].startswith("containerapp update --name imagegen --resource-group rg --yaml")
    assert "waiting up to 60s for a new revision" in result.stdout
    latest = fake.latest_revision()
    assert latest["ready"] and latest["template"]["containers"][0]["command"] == []
    assert "revision imagegen--r" in result.stdout  # a new one, named by the platform
    assert "is ready and runs the image's own command" in result.stdout
    assert result.stdout.splitlines()[-1] == "gate: passed"


def test_fake_az_control_plane_without_override_changes_nothing(service, fake):
    # No secrets are read either: an identity without listSecrets can run the gate.
    fake.seed_app(deployed_spec())
    fake.set(identity={"can_list_secrets": False})
    result = gate(service.base_url, fake)
    assert result.returncode == 0, result.stderr
    assert "runs the image's own command" in result.stdout
    assert fake.applied() == []
    assert not any("--show-secrets" in call for call in fake.calls())


def test_fake_az_control_plane_refuses_a_repeated_revision_suffix(fake, tmp_path):
    # What the gate avoids by dropping the suffix `show` returned (deploy/azure.sh sets one).
    fake.seed_app(deployed_spec(PLACEHOLDER))
    spec = deployed_spec()  # the same suffix as the running revision
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    command = ["az", "containerapp", "update", "--name", "imagegen", "--resource-group", "rg"]
    env = {**os.environ, **fake.env}
    result = subprocess.run(
        [*command, "--yaml", str(tmp_path / "spec.yaml")], env=env, capture_output=True, text=True
    )
    assert result.returncode == 1
    assert "revision with suffix d20240101-000000-0000 already exists" in result.stderr


def test_fake_az_control_plane_slow_rollout_gets_the_platform_timeout(service, fake):
    # A rollout starts a node, pulls a multi-GB image and passes the startup probe: the step
    # waits --platform-timeout, however short --health-timeout is.
    fake.seed_app(deployed_spec(PLACEHOLDER))
    fake.set(ready_after_polls=8)
    result = gate(service.base_url, fake, "--health-timeout", "1", "--platform-timeout", "60")
    assert result.returncode == 0, result.stderr
    assert sum("containerapp show --name imagegen" in c for c in fake.calls()) >= 8


def test_fake_az_control_plane_update_without_a_new_revision_is_a_platform_failure(service, fake):
    # An older CLI drops the empty lists: the PATCH keeps the command, the template is
    # unchanged, no revision is made, and the old one is "latest and ready" at once.
    fake.seed_app(deployed_spec(PLACEHOLDER))
    fake.set(cli={"unknown_fields": [], "drops_empty_lists": True, "refills_secrets": True})
    result = gate(service.base_url, fake, "--platform-timeout", "3")
    assert_platform_failure(result, "did not appear within 3s")
    assert "changed nothing the platform counts as a template change" in result.stderr


def test_fake_az_control_plane_new_revision_still_overriding_is_a_platform_failure(service, fake):
    fake.seed_app(deployed_spec(PLACEHOLDER))
    fake.set(concurrent_override=["sleep", "infinity"])
    result = gate(service.base_url, fake, "--platform-timeout", "10")
    assert_platform_failure(result, "is ready but still overrides the command")
    assert "sleep infinity" in result.stderr


def test_fake_az_control_plane_hung_az_is_a_platform_failure_not_a_traceback(service, fake):
    fake.seed_app(deployed_spec(PLACEHOLDER))
    fake.set(hang=["containerapp update"])
    started = time.monotonic()
    result = gate(service.base_url, fake, "--platform-timeout", "3")
    assert_platform_failure(
        result, "az containerapp update did not answer within the platform step's 3s"
    )
    assert time.monotonic() - started < 20


def test_fake_az_control_plane_one_node_profile_never_finishes_a_rollout(service, fake):
    # The whole node per revision, and the old revision keeps its node until the new one is
    # ready: with --max-nodes 1 the new revision waits for a node forever.
    fake.seed_app(deployed_spec(PLACEHOLDER))
    state = fake.state()
    state["environment"]["profiles"]["d4"]["max"] = 1
    fake.save(state)
    result = gate(service.base_url, fake, "--platform-timeout", "3")
    assert_platform_failure(result, "did not become ready within 3s")
    assert "maximum node count" in result.stderr


def test_fake_az_control_plane_secrets_go_back_with_their_values(service, fake):
    # An older CLI does not refill secret values itself: the update carries them, read with
    # --show-secrets, from a private file that is gone afterwards.
    fake.seed_app(deployed_spec(PLACEHOLDER))
    fake.set(cli={"unknown_fields": [], "drops_empty_lists": False, "refills_secrets": False})
    result = gate(service.base_url, fake)
    assert result.returncode == 0, result.stderr
    (applied,) = fake.applied()
    secrets = {
        s["name"]: s.get("value") for s in applied["spec"]["properties"]["configuration"]["secrets"]
    }
    assert secrets["api-token"] == SETTINGS["API_TOKEN"]
    assert secrets["registry-password"] == SETTINGS["REGISTRY_PASSWORD"]
    assert applied["mode"] == "0o600"
    update = next(c for c in fake.calls() if c.startswith("containerapp update"))
    assert not os.path.exists(update.split("--yaml ", 1)[1].split()[0])


def test_fake_az_control_plane_refused_secret_values_stop_before_any_update(service, fake):
    fake.seed_app(deployed_spec(PLACEHOLDER))
    fake.set(identity={"can_list_secrets": False})
    result = gate(service.base_url, fake)
    assert_platform_failure(result, "cannot read the app's secret values")
    assert "listSecrets" in result.stderr and "Nothing was changed" in result.stderr
    assert not any(call.startswith("containerapp update") for call in fake.calls())


def startup_window(spec: dict) -> float:
    """The longest the startup probe lets a container boot, in seconds."""
    (probe,) = [
        p
        for p in spec["properties"]["template"]["containers"][0]["probes"]
        if p["type"] == "Startup"
    ]
    return probe.get("initialDelaySeconds", 0) + probe["periodSeconds"] * probe["failureThreshold"]


def test_the_platform_timeout_outlasts_the_startup_probe_and_is_in_help():
    # The probe's window twice over: room for a node start and a multi-GB pull besides.
    assert 2 * startup_window(deployed_spec()) <= DEFAULT_TIMEOUT
    result = run_command("gate", "--help")
    assert "--platform-timeout" in result.stdout
    assert "(default 1200; polled every --interval)" in " ".join(result.stdout.split())


# -- deploy/azure.sh --------------------------------------------------------------------------

DEPLOY_SETTINGS = {
    "RESOURCE_GROUP": "rg",
    "LOCATION": "westeurope",
    "STORAGE_ACCOUNT": "imagegenmodels",
    "REGISTRY": "imagegenacr",
    "PYTHON": sys.executable,
    "TORCH_INDEX_URL": "https://wheels.example/cpu",
    "SECRET_KEY": "secret-key-value",
    "API_TOKEN": "token-value",
    "MONGODB_URI": "mongodb://db.example/todos",
    "ROLLOUT_TIMEOUT": "10",
    "ROLLOUT_INTERVAL": "0.1",
}
OPTIONAL = {
    "APP_NAME", "ENVIRONMENT", "SHARE_NAME", "WORKLOAD_PROFILE_TYPE", "WORKLOAD_PROFILE_NAME",
    "MIN_NODES", "MAX_NODES", "CPU", "MEMORY", "IMAGE", "REVISION_SUFFIX", "MODEL_ID",
    "TRUSTED_PROXIES", "VNET_PREFIX", "INFRA_SUBNET",
}  # fmt: skip


def azure_sh(fake: FakeAz, *args: str, **settings: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in OPTIONAL}
    env.update({**fake.env, **DEPLOY_SETTINGS, **settings})
    return subprocess.run(
        ["bash", str(ROOT / "deploy" / "azure.sh"), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def provision(fake: FakeAz, **settings: str) -> str:
    """Provisions, builds the image; the image reference `image` printed."""
    provisioned = azure_sh(fake, "provision", **settings)
    assert provisioned.returncode == 0, provisioned.stderr
    built = azure_sh(fake, "image")
    assert built.returncode == 0, built.stderr
    return built.stdout.strip()


@pytest.fixture(scope="module")
def provisions(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., str]:
    """deploy/azure.sh provision and image, run once per module for each set of settings:
    `provisions(fake, **settings)` leaves `fake` as they leave the control plane (their
    calls in its log too) and answers the image reference they printed."""
    done: dict[tuple, tuple[FakeAz, str]] = {}

    def provisioned(fake: FakeAz, **settings: str) -> str:
        key = tuple(sorted(settings.items()))
        if key not in done:
            once = FakeAz(tmp_path_factory.mktemp("provisioned"))
            done[key] = (once, provision(once, **settings))
        once, image = done[key]
        for name in ("state.json", "calls.log"):
            shutil.copy(once.dir / name, fake.dir / name)
        return image

    return provisioned


@pytest.fixture
def provisioned(fake: FakeAz, provisions: Callable[..., str]) -> str:
    """`fake` provisioned with the default settings: the image reference."""
    return provisions(fake)


def profile_added(fake: FakeAz) -> dict:
    (call,) = [c for c in fake.calls() if c.startswith("containerapp env workload-profile add")]
    options = dict(re.findall(r"--([\w-]+) (\S+)", call))
    return {
        "type": options["workload-profile-type"],
        "name": options["workload-profile-name"],
        "max": int(options["max-nodes"]),
    }


def test_fake_az_control_plane_provision_makes_room_for_every_rollout(fake, provisioned):
    """Two deploys: the second (an update, whose secret changed) rolls out beside the first,
    whose revision keeps its node until the new one is ready. Secrets are not in the
    template: without a new revision the running container would keep the old value; each
    deploy's own revision suffix makes one."""
    image = provisioned
    first = azure_sh(fake, "deploy", IMAGE=image)
    assert first.returncode == 0, first.stderr
    second = azure_sh(fake, "deploy", IMAGE=image, API_TOKEN="rotated-token")
    assert second.returncode == 0, second.stderr
    revisions = fake.state()["revisions"]
    assert len(revisions) == 2
    latest = fake.latest_revision()
    assert latest["ready"] and latest["active"]
    assert latest["secrets"]["api-token"] == "rotated-token"
    assert [r["active"] for r in revisions.values()].count(True) == 1
    assert "is ready and runs the image's own command" in second.stdout


def app_env(fake: FakeAz, app: str = "imagegen") -> dict[str, str]:
    (container,) = fake.state()["apps"][app]["properties"]["template"]["containers"]
    return {item["name"]: item.get("value") for item in container["env"]}


def test_fake_az_control_plane_the_app_trusts_its_environments_ingress_subnet_alone(
    fake, provisioned
):
    """provision gives the environment a network of its own; deploy sets TRUSTED_PROXIES to
    its infrastructure subnet (where the ingress is), so links are https, and HSTS on. (The
    distributed layout's web app: test_..._distributed_layout_provisions_redis_and_...)"""
    image, layout = provisioned, {}
    deployed = azure_sh(fake, "deploy", IMAGE=image, **layout)
    assert deployed.returncode == 0, deployed.stderr
    env = app_env(fake)
    assert env["TRUSTED_PROXIES"] == "10.42.0.0/23"
    assert env["SECURE_PROXY_SSL_HEADER"] == "1" and int(env["SECURE_HSTS_SECONDS"]) >= 86400
    mine = azure_sh(fake, "deploy", IMAGE=image, TRUSTED_PROXIES="10.9.0.0/24", **layout)
    assert mine.returncode == 0, mine.stderr
    assert app_env(fake)["TRUSTED_PROXIES"] == "10.9.0.0/24"
    # An environment made without a network of its own: its ingress's addresses are unknown.
    state = fake.state()
    state["environment"].pop("properties")
    fake.save(state)
    # Deployed as before (no proxy trusted), with a warning that says how to trust one.
    older = azure_sh(fake, "deploy", IMAGE=image, **layout)
    assert older.returncode == 0, older.stderr
    assert "warning: the environment" in older.stderr and "set TRUSTED_PROXIES" in older.stderr
    assert not app_env(fake)["TRUSTED_PROXIES"]


def test_fake_az_control_plane_provision_refuses_a_single_node_profile(fake):
    result = azure_sh(fake, "provision", MAX_NODES="1")
    assert result.returncode == 1
    assert "MAX_NODES=1" in result.stderr and "side by side" in result.stderr
    assert not any("workload-profile add" in call for call in fake.calls())


# The seed's reference (the whole D4 node) and the memory-optimised fallback for a runtime
# reservation (docs/azure.md): 0.5 vCPU and 8 GiB of each E4 node left to the runtime.
REFERENCE = {}
FALLBACK = {
    "WORKLOAD_PROFILE_TYPE": "E4",
    "WORKLOAD_PROFILE_NAME": "e4",
    "CPU": "3.5",
    "MEMORY": "24Gi",
}


@pytest.mark.parametrize("settings", [REFERENCE, FALLBACK], ids=["reference", "fallback"])
def test_rollout_arithmetic_nodes_times_profile_hold_two_revisions(fake, provisions, settings):
    provisions(fake, **settings)
    profile = profile_added(fake)
    spec = deployed_spec(**{k: v for k, v in settings.items() if k != "WORKLOAD_PROFILE_TYPE"})
    assert spec["properties"]["workloadProfileName"] == profile["name"]
    (container,) = spec["properties"]["template"]["containers"]
    cpu, memory = float(container["resources"]["cpu"]), float(container["resources"]["memory"][:-2])
    replicas = spec["properties"]["template"]["scale"]["maxReplicas"]
    no_reserve = {"cpu": 0.0, "memory_gib": 0.0}
    per_node = replicas_per_node({"type": profile["type"]}, cpu, memory, no_reserve)
    # A rollout runs the old and the new revision at once: two revisions' replicas.
    assert profile["max"] * per_node >= 2 * replicas
    node_cpu, node_memory = PROFILE_SIZES[profile["type"]]
    if settings is REFERENCE:  # the whole node: any runtime reservation and it fits nowhere
        assert (cpu, memory) == (node_cpu, node_memory)
        assert replicas_per_node({"type": "D4"}, cpu, memory, {"cpu": 0.1, "memory_gib": 0}) == 0
    else:
        reserve = {"cpu": 0.5, "memory_gib": 8.0}
        assert replicas_per_node({"type": "E4"}, cpu, memory, reserve) >= 1
        assert memory >= 16  # still room for the 14 GB fp32 model


def test_fake_az_control_plane_fallback_profile_deploys_by_settings_alone(fake, provisions):
    image = provisions(fake, **FALLBACK)
    result = azure_sh(fake, "deploy", IMAGE=image, **FALLBACK)
    assert result.returncode == 0, result.stderr
    spec = fake.applied()[-1]["spec"]
    assert spec["properties"]["workloadProfileName"] == "e4"
    assert spec["properties"]["template"]["containers"][0]["resources"] == {
        "cpu": 3.5,
        "memory": "24Gi",
    }


@pytest.mark.parametrize(
    ("versions", "refusal"),
    [
        ({"azure-cli": "2.52.0", "extensions": {}}, "az 2.52.0 is older than 2.53.0"),
        (
            {"azure-cli": "2.61.0", "extensions": {"containerapp": "0.3.42"}},
            "the containerapp extension 0.3.42 is older than 0.3.43",
        ),
    ],
    ids=["old-cli", "old-extension"],
)
def test_fake_az_control_plane_old_az_is_refused_before_anything_runs(fake, versions, refusal):
    fake.set(az_version=versions)
    for command in ("provision", "deploy"):
        result = azure_sh(fake, command, IMAGE="imagegenacr.azurecr.io/imagegen:x")
        assert result.returncode == 1 and refusal in result.stderr, result.stderr
    assert all(call.startswith("version") for call in fake.calls())


def test_fake_az_control_plane_new_enough_extension_is_accepted(fake):
    fake.set(az_version={"azure-cli": "2.53.0", "extensions": {"containerapp": "0.3.52"}})
    assert azure_sh(fake, "provision").returncode == 0


@pytest.mark.parametrize(
    ("dropped", "stop"),
    [
        ("mountOptions", "volume models has mountOptions None, not 'nobrl,"),
        ("workloadProfileName", "workloadProfileName is 'Consumption', not 'd4'"),
    ],
)
def test_fake_az_control_plane_fields_the_cli_drops_stop_the_deploy(
    fake, provisioned, dropped, stop
):
    image = provisioned
    fake.set(cli={"unknown_fields": [dropped], "drops_empty_lists": False, "refills_secrets": True})
    result = azure_sh(fake, "deploy", IMAGE=image)
    assert result.returncode == 1, result.stderr
    assert "deploy: STOPPED: the platform did not store the spec" in result.stderr
    assert stop in result.stderr
    assert "is ready" not in result.stdout  # stopped before waiting for the revision


def test_readback_reads_the_spec_as_a_yaml_parser_does():
    text = render.render(TEMPLATE, SETTINGS)
    spec = yaml.safe_load(text)
    assert readback.expected(text) == {
        "workloadProfileName": spec["properties"]["workloadProfileName"],
        "mountOptions": {
            v["name"]: v["mountOptions"] for v in spec["properties"]["template"]["volumes"]
        },
    }
    assert readback.expected(text)["mountOptions"]  # the share's options are there to check


def test_fake_az_control_plane_image_tags_name_one_build(fake, provisioned):
    image = provisioned
    commit = subprocess.run(
        ["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    (tag,) = fake.state()["images"]
    assert tag.startswith(f"imagegen:{commit}")
    assert image == f"imagegenacr.azurecr.io/imagegen@{fake.state()['images'][tag]}"
    again = azure_sh(fake, "image", tag.split(":", 1)[1])
    assert again.returncode == 1 and "tags are never reused" in again.stderr
    assert sum(call.startswith("acr build") for call in fake.calls()) == 1


def test_fake_az_control_plane_deploy_pins_a_tag_to_its_digest(fake, provisioned):
    (tag,) = fake.state()["images"]
    result = azure_sh(fake, "deploy", IMAGE=f"imagegenacr.azurecr.io/{tag}")
    assert result.returncode == 0, result.stderr
    image = fake.applied()[-1]["spec"]["properties"]["template"]["containers"][0]["image"]
    assert image == f"imagegenacr.azurecr.io/imagegen@{fake.state()['images'][tag]}"


def test_new_revision_suffixes_follow_the_platforms_rules():
    suffixes = {render.new_revision_suffix() for _ in range(50)}
    assert len(suffixes) == 50
    for suffix in suffixes:
        assert re.fullmatch(r"[a-z][a-z0-9-]*[a-z0-9]", suffix) and "--" not in suffix
        assert len("imagegen--" + suffix) <= 54


def test_docs_state_the_az_versions_azure_sh_requires():
    script = (ROOT / "deploy" / "azure.sh").read_text()
    cli = re.search(r"^MIN_AZ_CLI=(\S+)$", script, re.M).group(1)
    extension = re.search(r"^MIN_CONTAINERAPP_EXTENSION=(\S+)$", script, re.M).group(1)
    section = (ROOT / "docs" / "azure.md").read_text()
    assert f"azure-cli {cli}" in section and f"containerapp extension {extension}" in section


def test_docs_settings_table_holds_the_scripts_defaults():
    script = (ROOT / "deploy" / "azure.sh").read_text()
    defaults = dict(re.findall(r'^(\w+)="\$\{\1:-([^}]*)\}"$', script, re.M))
    assert defaults["WORKLOAD_PROFILE_NAME"] == render.DEFAULTS["WORKLOAD_PROFILE_NAME"]
    defaults.update(render.DEFAULTS)  # CPU and MEMORY are the template's
    section = (ROOT / "docs" / "azure.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| `([^`]*)` \|", section, re.M))
    assert {"MAX_NODES", "CPU", "MEMORY", "ROLLOUT_TIMEOUT"} <= set(rows)
    assert rows == {name: defaults[name] for name in rows}


# -- the distributed layout (LAYOUT=distributed) ----------------------------------------------

DISTRIBUTED = {"LAYOUT": "distributed", "REDIS_NAME": "imagegenjobs", "MAX_NODES": "3"}


def test_fake_az_control_plane_distributed_layout_provisions_redis_and_deploys_two_apps(
    fake, provisions
):
    image = provisions(fake, **DISTRIBUTED)
    assert any(c.startswith("redis create --name imagegenjobs") for c in fake.calls())
    result = azure_sh(fake, "deploy", IMAGE=image, **DISTRIBUTED)
    assert result.returncode == 0, result.stderr
    apps = fake.state()["apps"]
    assert set(apps) == {"imagegen", "imagegen-worker"}
    web, worker = (apps[name]["properties"] for name in ("imagegen", "imagegen-worker"))
    images = set()
    for app in (web, worker):  # one image, the role by its environment, no override
        (container,) = app["template"]["containers"]
        images.add(container["image"])
        assert "command" not in container and "args" not in container
    assert len(images) == 1 and "@sha256:" in images.pop()
    env = {e["name"]: e for e in web["template"]["containers"][0]["env"]}
    assert env["ROLE"]["value"] == "web" and env["JOB_BROKER_URL"]["secretRef"]
    # The environment's ingress subnet trusted, links https, HSTS on (as the single app's).
    assert env["TRUSTED_PROXIES"]["value"] == "10.42.0.0/23"
    assert env["SECURE_PROXY_SSL_HEADER"]["value"] == "1"
    assert int(env["SECURE_HSTS_SECONDS"]["value"]) >= 86400
    assert web["workloadProfileName"] == "Consumption"
    assert web["template"]["scale"]["maxReplicas"] == 3  # any replica answers for any job
    worker_env = {e["name"]: e for e in worker["template"]["containers"][0]["env"]}
    assert worker_env["ROLE"]["value"] == "worker"
    assert worker["workloadProfileName"] == "d4"
    assert "targetPort" not in worker["configuration"].get("ingress", {})  # no way in
    secrets = {s["name"]: s["value"] for s in worker["configuration"]["secrets"]}
    # The key holds / + =: quoted in the URL, TLS with certificate checks (Celery needs it).
    assert secrets["job-broker-url"] == (
        "rediss://:fake%2Fredis%2Bkey%3D@imagegenjobs.redis.cache.windows.net:6380/0"
        "?ssl_cert_reqs=required"
    )
    assert secrets["redis-password"] == "fake/redis+key="
    assert_scaler_reads_the_job_store(worker)
    for name in ("imagegen", "imagegen-worker"):
        assert fake.latest_revision(name)["ready"]


def assert_scaler_reads_the_job_store(worker: dict) -> None:
    """The worker app's scale rule, read as KEDA's Redis list scaler reads it
    (tests/support/keda.py), reaches the Redis the worker's JOB_BROKER_URL names (host,
    port, database, password, and TLS exactly when the URL is rediss://: Azure Cache for
    Redis takes only TLS on 6380, and a scaler without it never connects, so only the
    minimum worker would ever run), counts the list the job store keeps of queued and
    running jobs (not Celery's, which loses a job as it starts), and asks for one worker
    per unfinished job within the app's bounds."""
    from imagegen.distributed.store import UNFINISHED

    scale = worker["template"]["scale"]
    (rule,) = scale["rules"]
    scaler = RedisListScaler.from_rule(rule)
    secrets = {s["name"]: s["value"] for s in worker["configuration"]["secrets"]}
    (container,) = worker["template"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    broker = urlsplit(secrets[env["JOB_BROKER_URL"]["secretRef"]])
    assert scaler.tls is (broker.scheme == "rediss")
    assert (scaler.host, scaler.port) == (broker.hostname, broker.port)
    assert scaler.database == int(broker.path.strip("/") or 0)
    assert scaler.password_secret is not None
    assert secrets[scaler.password_secret] == unquote(broker.password or "")
    assert scaler.list_name == UNFINISHED
    low, high = scale["minReplicas"], scale["maxReplicas"]
    assert low >= 1  # a job submitted to an empty deployment has a worker to take it
    for unfinished in range(high + 3):
        wanted = min(high, max(low, unfinished))
        assert scaler.replicas(unfinished, minimum=low, maximum=high) == wanted, unfinished


def test_fake_az_control_plane_distributed_layout_needs_a_node_per_worker_and_one_more(fake):
    result = azure_sh(fake, "provision", **{**DISTRIBUTED, "MAX_NODES": "2"})
    assert result.returncode != 0
    assert "needs WORKER_MAX_REPLICAS + 1 = 3 nodes" in result.stderr
    assert not any(c.startswith("group create") for c in fake.calls())


def test_the_worker_app_scales_on_unfinished_jobs_from_one_with_keda_redis():
    values = {
        "LOCATION": "westeurope", "WORKER_APP_NAME": "imagegen-worker", "ENVIRONMENT_ID": "e",
        "IMAGE": "r.azurecr.io/imagegen@sha256:1", "REGISTRY_SERVER": "r.azurecr.io",
        "REGISTRY_USERNAME": "r", "REGISTRY_PASSWORD": "p", "SECRET_KEY": "k",
        "JOB_BROKER_URL": "rediss://:k@h:6380/0", "REDIS_PASSWORD": "k",
        "REDIS_ADDRESS": "h:6380", "MODEL_ID": "org/model",
    }  # fmt: skip
    template = (ROOT / "deploy" / "containerapp-worker.yaml").read_text()
    spec = yaml.safe_load(render.render(template, values))["properties"]
    scale = spec["template"]["scale"]
    assert scale["minReplicas"] == 1 and scale["maxReplicas"] == 2
    assert_scaler_reads_the_job_store(spec)
    more = {**values, "WORKER_MAX_REPLICAS": "6"}  # the arithmetic over a wider range
    assert_scaler_reads_the_job_store(yaml.safe_load(render.render(template, more))["properties"])
    (container,) = spec["template"]["containers"]
    assert container["resources"] == {"cpu": 4, "memory": "16Gi"}  # one D4 node per worker
    assert spec["template"]["terminationGracePeriodSeconds"] == 600
