"""The Azure side, against the fake `az` (tests/support/fake_az.py), which behaves as the
Container Apps docs and the CLI's source say: the gate's platform step (manage.py gate
--container-app) and deploy/azure.sh (provision, image, deploy) run as an operator runs them.
"""

import importlib.util
import os
import re
import subprocess
import time

import pytest
import yaml

from imagegen.ops.platform import DEFAULT_TIMEOUT
from tests.support.commands import manage
from tests.support.fake_az import FakeAz
from tests.support.processes import ROOT
from tests.support.scripted_service import Reply, ScriptedService, model_state


def deploy_module(name: str):
    """deploy/NAME.py, which is a script directory, not a package."""
    spec = importlib.util.spec_from_file_location(f"deploy_{name}", ROOT / "deploy" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render = deploy_module("render")
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


def gate(base_url: str, fake: FakeAz, *extra: str) -> subprocess.CompletedProcess:
    return manage("gate", "--base-url", base_url, *FAST, *PLATFORM, *extra, env=fake.env)


def assert_platform_failure(result: subprocess.CompletedProcess, text: str) -> None:
    assert result.returncode == 15, (result.stdout, result.stderr)
    assert result.stderr.startswith("gate: FAILED: ") and text in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr  # no traceback


def test_fake_az_control_plane_command_override_is_removed(start_app, fake):
    fake.seed_app(deployed_spec(PLACEHOLDER))
    result = gate(start_app().base_url, fake, "--platform-timeout", "60")
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
    result = manage("gate", "--help")
    assert "--platform-timeout" in result.stdout
    assert "(default 1200; polled every --interval)" in " ".join(result.stdout.split())


def test_new_revision_suffixes_follow_the_platforms_rules():
    suffixes = {render.new_revision_suffix() for _ in range(50)}
    assert len(suffixes) == 50
    for suffix in suffixes:
        assert re.fullmatch(r"[a-z][a-z0-9-]*[a-z0-9]", suffix) and "--" not in suffix
        assert len("imagegen--" + suffix) <= 54
