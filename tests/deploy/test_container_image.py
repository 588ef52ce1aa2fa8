"""The container image and the deployment spec: the application starts by default, with the
same command outside Docker (no Docker engine runs here), and the platform settings hold."""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import requests
import yaml

from tests.support.processes import ROOT, alive, children, free_port

DOCKERFILE = (ROOT / "Dockerfile").read_text()


def dockerfile_cmd() -> list[str]:
    return json.loads(re.search(r"^CMD (\[.*\])$", DOCKERFILE, re.M).group(1))


def dockerfile_env() -> dict[str, str]:
    block = re.search(r"^ENV ((?:.*\\\n)*.*)$", DOCKERFILE, re.M).group(1)
    pairs = re.findall(r"(\w+)=(\S+)", block.replace("\\\n", " "))
    return dict(pairs)


def test_the_default_command_is_the_role_script_and_starts_the_application():
    assert dockerfile_cmd() == ["scripts/start"]
    assert "COPY scripts/start scripts/start" in DOCKERFILE
    assert "!scripts/start" in (ROOT / ".dockerignore").read_text().split()
    start = (ROOT / "scripts" / "start").read_text()
    assert "web) exec python -m config.front_proxy ;;" in start
    assert "worker) exec python manage.py run_worker" in start
    assert "ENTRYPOINT" not in DOCKERFILE
    assert re.search(r"^USER \d+:\d+$", DOCKERFILE, re.M)  # not root
    assert "HEALTHCHECK" in DOCKERFILE and "/health" in DOCKERFILE


def test_the_image_installs_base_txt_as_the_set_up_does():
    """torch's CPU build from base.txt's pin, through the set-up's own installer (pip's sources
    plus TORCH_INDEX_URL as an extra index): no torch of the image's own, no index replaced."""
    assert re.search(r"^ARG TORCH_INDEX_URL$", DOCKERFILE, re.M)
    assert "COPY scripts/install_requirements scripts/install_requirements" in DOCKERFILE
    assert "RUN scripts/install_requirements python -r requirements/base.txt" in DOCKERFILE
    assert "!scripts/install_requirements" in (ROOT / ".dockerignore").read_text().split()
    assert "pip install" not in DOCKERFILE and "torch==" not in DOCKERFILE
    assert "--index-url" not in DOCKERFILE


def image_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The image's environment, paths moved into the test's folder, the venv on PATH."""
    bin_dir = str(Path(os.sys.executable).parent)
    return {
        **os.environ,
        **dockerfile_env(),
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "MODEL_DIR": str(tmp_path / "models"),
        "DOWNLOAD_CACHE_DIR": str(tmp_path / "cache"),
        "DATA_DIR": str(tmp_path / "data"),
        "HF_HOME": str(tmp_path / "hf"),
        "SECRET_KEY": "image-test",
        "DEVICE": "cpu",
        "PRELOAD_MODEL_CODE": "0",
        **extra,
    }


def image_tree(target: Path) -> Path:
    """The files the Dockerfile's COPY lines put in the image's WORKDIR, copied into `target`:
    a package the image leaves out is missing here too."""
    for line in re.findall(r"^COPY (?!--)(.+)$", DOCKERFILE, re.M):
        *sources, destination = line.split()
        for source in sources:
            into = (
                target / destination / Path(source).name
                if destination.endswith("/") and not source.endswith("/")
                else target / destination
            )
            if (ROOT / source).is_dir():
                shutil.copytree(ROOT / source, into, dirs_exist_ok=True)
            else:
                into.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / source, into)
    return target


def test_the_image_command_serves_health_outside_docker_behind_its_proxy(tmp_path: Path):
    """From exactly what the image copies (image_tree), started by the image's command with
    the image's settings on an address beyond loopback, as its BIND is: nginx answers
    /health (the platform's readiness check) for gunicorn. Then nginx dies: the container's
    process exits and leaves nothing running (the platform restarts it whole)."""
    port = free_port()
    env = image_env(tmp_path, BIND=f"0.0.0.0:{port}", PROXY_UPSTREAM_PORT=str(free_port()))
    for outside in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH"):  # the tests', not the image's
        env.pop(outside, None)
    app = image_tree(tmp_path / "app")
    log = tmp_path / "image.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            dockerfile_cmd(), cwd=app, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:  # nginx answers 502 until gunicorn is up
            with contextlib.suppress(requests.RequestException):
                health = requests.get(f"http://127.0.0.1:{port}/health", timeout=2)
                if health.status_code == 200:
                    break
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        assert health.headers["Server"] == "nginx"
        assert health.json()["status"] == "healthy" and health.json()["device"] == "cpu"

        pids = children(server.pid)
        os.kill(next(pid for pid, command in pids if "nginx" in command), signal.SIGKILL)
        assert server.wait(60) != 0
        assert "nginx exited" in log.read_text()
        for pid, command in pids:
            assert not alive(pid), f"{command} left running"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)
        server.wait(30)


def test_the_dockerignore_keeps_data_venvs_and_tests_out():
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".data", ".venv", "tests"} <= ignored
    assert "Dockerfile" not in ignored  # az acr build uploads what .dockerignore keeps


HOSTILE = {
    "LOCATION": "westeurope",
    "APP_NAME": "imagegen",
    "ENVIRONMENT_ID": "/subscriptions/x/resourceGroups/rg/providers/Microsoft.App/envs/e",
    "IMAGE": "imagegenacr.azurecr.io/imagegen:1",
    "SECRET_KEY": "a #comment: &anchor *alias !tag %x @y 'q' \"dq\"",
    "API_TOKEN": "&token",
    "MONGODB_URI": "mongodb://u:p@h:27017/todos?retryWrites=true&w=majority",
    "MODEL_ID": "stabilityai/stable-diffusion-xl-base-1.0",
    "REGISTRY_SERVER": "imagegenacr.azurecr.io",
    "REGISTRY_USERNAME": "imagegenacr",
    "REGISTRY_PASSWORD": "p#ss: word",
    "TRUSTED_PROXIES": "10.42.0.0/23",
}


def rendered_spec() -> dict:
    """The spec as deploy/azure.sh renders it, with values YAML would otherwise mangle."""
    import sys

    sys.path.insert(0, str(ROOT / "deploy"))
    from render import render

    return yaml.safe_load(render((ROOT / "deploy" / "containerapp.yaml").read_text(), HOSTILE))


def test_rendering_keeps_every_value_intact():
    spec = rendered_spec()
    secrets = {s["name"]: s["value"] for s in spec["properties"]["configuration"]["secrets"]}
    assert secrets == {
        "registry-password": HOSTILE["REGISTRY_PASSWORD"],
        "secret-key": HOSTILE["SECRET_KEY"],
        "api-token": HOSTILE["API_TOKEN"],
        "mongodb-uri": HOSTILE["MONGODB_URI"],
    }
    assert spec["properties"]["template"]["containers"][0]["image"] == HOSTILE["IMAGE"]


def test_the_container_app_spec_matches_the_seeds_limits_and_rules():
    spec = rendered_spec()
    properties = spec["properties"]
    container = properties["template"]["containers"][0]
    assert "command" not in container and "args" not in container  # the image's own command
    assert container["resources"] == {"cpu": 4, "memory": "16Gi"}
    assert properties["workloadProfileName"] == "d4"

    env = {e["name"]: e.get("value") for e in container["env"]}
    (mount,) = container["volumeMounts"]
    assert env["MODEL_DIR"] == mount["mountPath"]
    (volume,) = properties["template"]["volumes"]
    assert volume["storageType"] == "AzureFile" and volume["name"] == mount["volumeName"]
    assert "nobrl" in volume["mountOptions"].split(",")

    probes = {p["type"]: p for p in container["probes"]}
    assert set(probes) == {"Startup", "Liveness", "Readiness"}
    for probe in probes.values():
        assert probe["httpGet"] == {"path": "/health", "port": 8000}
    for probe in probes.values():  # the platform's documented ranges
        assert 1 <= probe["failureThreshold"] <= 10 and probe["periodSeconds"] <= 240
        assert probe.get("initialDelaySeconds", 0) <= 60
    startup = probes["Startup"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120  # boot, not the load
    assert properties["template"]["scale"]["maxReplicas"] == 1  # state is per process


def test_role_worker_runs_a_generation_worker_from_the_same_command(tmp_path: Path):
    from tests.support.distributed import RedisServer

    with RedisServer(tmp_path / "redis") as server:
        env = image_env(tmp_path, ROLE="worker", JOB_BROKER_URL=server.url)
        with (tmp_path / "worker.log").open("wb") as log:
            worker = subprocess.Popen(
                dockerfile_cmd(), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        try:
            deadline = time.monotonic() + 60
            while not server.client().smembers("imagegen:workers"):  # it beats
                assert worker.poll() is None, (tmp_path / "worker.log").read_text()
                assert time.monotonic() < deadline
                time.sleep(0.1)
        finally:
            worker.terminate()
            worker.wait(30)


def test_an_unknown_role_refuses_to_start_naming_it(tmp_path: Path):
    done = subprocess.run(
        dockerfile_cmd(), cwd=ROOT, env=image_env(tmp_path, ROLE="db"), capture_output=True
    )
    assert done.returncode == 2
    assert b"ROLE must be web or worker, got 'db'" in done.stderr
