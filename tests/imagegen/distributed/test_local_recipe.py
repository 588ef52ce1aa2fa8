"""docs/distributed.md's Redis, as written: the local recipe's Redis listens on loopback alone
with a password and the recipe keeps its data in a folder of its own; and a Redis other
machines reach, configured by the docs' lines (a user of its own, the default user off, TLS
only), carries a web replica (its routes served in this process) and a worker process that
pull the model and make an image. The same stack, with INPAINT_MODEL_ID, holds the inpainting
checkpoint in distributed mode: the worker inpaints on the checkpoint's UNet and says so,
keeps the pixels beyond the mask, and goes back to the base UNet for img2img (the rules in
detail, in process: tests/imagegen/model/test_inpaint_checkpoint.py)."""

import os
import re
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
import requests

from tests.imagegen.generation.test_edits import (
    assert_kept_beyond_the_edge_and_repainted,
    mask_image,
    png,
    source_image,
)
from tests.support.commands import settings_of
from tests.support.distributed import REDIS_SERVER, Stack, replica_here
from tests.support.local_hub import LocalHub
from tests.support.model_service import (
    PULL_TIMEOUT,
    SD_INPAINT_REPO,
    model_service_env,
    pull_until_ready,
)
from tests.support.processes import ROOT, free_port

DOC = (ROOT / "docs" / "distributed.md").read_text()


def blocks(heading: str, language: str) -> list[str]:
    section = DOC[DOC.index(heading) :]
    section = section[: section.index("\n## ", 1)] if "\n## " in section[1:] else section
    return re.findall(rf"```{language}\n(.*?)```", section, re.S)


def recipe_lines() -> tuple[str, str]:
    """The recipe's set-up (its lines up to the workers' start) and its last line."""
    (block,) = blocks("## Two replicas and two workers on one machine", "sh")
    setup = block[: block.index(".venv/bin/python manage.py run_worker")]
    return setup, block.strip().splitlines()[-1]


def test_the_recipes_redis_is_on_loopback_with_a_password_and_its_data_its_own(tmp_path: Path):
    setup, last = recipe_lines()
    port = free_port()
    # Not Debian's own port: its package starts a Redis there, where the recipe's could not bind.
    assert "--port 6390" in setup and "6379" not in setup.replace("Debian's own on 6379", "")
    on_port = setup.replace("6390", str(port))
    # The recipe's own lines, then the environment they leave, for the processes it starts.
    done = subprocess.run(
        ["bash", "-c", f"set -e\n{on_port}\nenv -0"],
        cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp_path)},
        capture_output=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    env = dict(item.split("=", 1) for item in done.stdout.decode().split("\0") if "=" in item)
    try:
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port, socket_timeout=5).ping()  # no password: refused
        client = redis.Redis.from_url(env["JOB_BROKER_URL"], socket_timeout=5)
        assert client.ping()
        assert client.config_get("bind") == {"bind": "127.0.0.1"}
        assert env["JOB_BROKER_URL"].startswith(f"redis://:{env['REDISCLI_AUTH']}@127.0.0.1:")
        assert len(env["REDISCLI_AUTH"]) >= 32
        assert env["REDISCLI_AUTH"] not in setup  # made afresh, not a password in the docs
        # Every folder the processes write to is in the recipe's own DATA_DIR.
        data = Path(env["DATA_DIR"])
        assert data.parent == tmp_path and data.is_dir()
        settings = settings_of({k: v for k, v in env.items() if k != "DJANGO_SETTINGS_MODULE"})
        for name in ("MODEL_DIR", "DOWNLOAD_CACHE_DIR", "OUTPUT_DIR"):
            assert data in Path(settings[name]).parents, (name, settings[name])
    finally:
        # The recipe's own stop, without the `kill` of the processes this test did not start.
        stop = last.split(";", 1)[1].replace("6390", str(port))
        stopped = subprocess.run(
            ["bash", "-c", stop], env=env, capture_output=True, text=True, timeout=30
        )
    assert stopped.returncode == 0, stopped.stderr
    assert not Path(env["DATA_DIR"]).exists()


def certificates(folder: Path) -> dict[str, Path]:
    """A CA and a certificate for 127.0.0.1 it signed (openssl, as one makes them by hand)."""
    folder.mkdir()
    files = {name: folder / name for name in ("ca.crt", "ca.key", "redis.crt", "redis.key")}

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=ca",
            "-keyout", "ca.key", "-out", "ca.crt")  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
            "-keyout", "redis.key", "-out", "redis.csr")  # fmt: skip
    (folder / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "redis.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-days",
            "1", "-CAcreateserial", "-extfile", "san.cnf", "-out", "redis.crt")  # fmt: skip
    return files


class DocsRedis:
    """redis-server on the docs' configuration lines: its address, port, certificate paths and
    secret those of this test, every other line as written."""

    def __init__(self, work: Path) -> None:
        (conf,) = blocks("### A Redis other machines reach", "conf")
        (url,) = re.findall(r"`JOB_BROKER_URL=(rediss://\S+)`", DOC)
        self.port = free_port()
        secret = secrets.token_hex(16)
        files = certificates(work / "tls")
        conf = re.sub(r"^bind .*$", "bind 127.0.0.1", conf, flags=re.M)
        conf = re.sub(r"^tls-port .*$", f"tls-port {self.port}", conf, flags=re.M)
        for name, path in files.items():
            conf = conf.replace(f"/etc/redis/tls/{name}", str(path))
        self.conf = work / "redis.conf"
        self.conf.write_text(conf.replace("LONG-RANDOM-SECRET", secret) + 'save ""\n')
        self.url = url.replace("LONG-RANDOM-SECRET", secret).replace(
            "10.0.0.5:6380", f"127.0.0.1:{self.port}"
        )
        self.ca = files["ca.crt"]
        self.log = work / "redis.log"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 20) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [REDIS_SERVER, str(self.conf)], stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        client = redis.Redis.from_url(self.url, socket_timeout=5)
        deadline = time.monotonic() + timeout
        while True:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                assert self.process.poll() is None, self.log.read_text()
                assert time.monotonic() < deadline, self.log.read_text()
                time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(20)


@dataclass
class DocsStack:
    """The docs' Redis, a worker process on it and a share the model was pulled onto."""

    server: DocsRedis
    env: dict[str, str]


@pytest.fixture(scope="module")
def docs_stack(hub_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DocsStack]:
    work = tmp_path_factory.mktemp("docs-redis")
    server = DocsRedis(work)
    # The CA trusted as the docs say (SSL_CERT_FILE), here and in the processes started.
    with pytest.MonkeyPatch.context() as patch, LocalHub(hub_root) as hub:
        patch.setenv("SSL_CERT_FILE", str(server.ca))
        env = {
            **model_service_env(hub.url, work / "share", work),
            "INPAINT_MODEL_ID": SD_INPAINT_REPO,
        }
        stack = Stack(env, work)
        stack.redis = server  # type: ignore[assignment]
        stack.env["JOB_BROKER_URL"] = server.url
        with stack:
            stack.start(replicas=0, workers=1)  # the stack starts its Redis: this one
            with replica_here(**stack.env) as app:
                status = pull_until_ready(app, timeout=PULL_TIMEOUT["distributed"])
                assert status["inpaint"]["model_id"] == SD_INPAINT_REPO
            yield DocsStack(server, stack.env)


def test_a_redis_with_the_docs_user_and_tls_carries_the_service(docs_stack: DocsStack):
    server = docs_stack.server
    with replica_here(**docs_stack.env) as app:
        made = requests.post(
            app.url("/generate"), data={"prompt": "a lighthouse", "size": "64x64"}, timeout=120
        )
        assert made.status_code == 200, made.text
        assert made.headers["Content-Type"] == "image/png"
    # Without the user: refused; the plain-text port is off.
    anonymous = server.url.replace(server.url.split("@")[0] + "@", "rediss://")
    with pytest.raises(redis.AuthenticationError):
        redis.Redis.from_url(anonymous, socket_timeout=5).ping()


def edit(url: str, *, mask: bool) -> requests.Response:
    files = {"image": ("in.png", png(source_image()), "image/png")}
    if mask:
        files["mask"] = ("mask.png", png(mask_image()), "image/png")
    fields = {"prompt": "a red door", "seed": "4", "steps": "3", "strength": "1"}
    return requests.post(f"{url}/generate", data=fields, files=files, timeout=120)


def test_a_worker_inpaints_on_the_checkpoints_unet_and_img2img_on_the_base(docs_stack: DocsStack):
    with replica_here(**docs_stack.env) as replica:
        url = replica.url("")
        answer = edit(url, mask=True)
        assert answer.status_code == 200, answer.text
        assert answer.headers["X-Inpaint-Model"] == SD_INPAINT_REPO
        image_id = answer.headers["X-Image-Id"]
        record = requests.get(f"{url}/images/{image_id}", timeout=10).json()
        inpaint_model = record["parameters"]["edit"]["inpaint_model"]
        assert inpaint_model["model_id"] == SD_INPAINT_REPO
        assert_kept_beyond_the_edge_and_repainted(answer.content)

        plain = edit(url, mask=False)
        assert plain.status_code == 200, plain.text
        assert "X-Inpaint-Model" not in plain.headers
