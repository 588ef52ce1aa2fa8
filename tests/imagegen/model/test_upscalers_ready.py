"""MODEL_ID's state waits for UPSCALERS' files: the model's pull job fetches them, in process
(served_here) on the tiny SD model and a tiny random ESRGAN on the test hub."""

import time
from pathlib import Path

from tests.support.distributed import replica_here
from tests.support.in_process import served_here
from tests.support.local_hub import LocalHub
from tests.support.model_service import model_service_env, wait_for_state
from tests.support.tiny_upscaler import ESRGAN_REPO, place_on_hub

UPSCALERS = f"{ESRGAN_REPO}:tiny-x4.pth"


def test_the_models_pull_brings_the_upscalers_and_ready_waits_for_them(
    hub_root: Path, tmp_path: Path
):
    """MODEL_ID already on the share, UPSCALERS added: the model's own pull job (not POST
    /model/pull's background fetch) pulls the files, and the state is ready only after."""
    place_on_hub(hub_root)
    with LocalHub(hub_root) as hub:
        env = model_service_env(hub.url, tmp_path / "share", tmp_path)
        with served_here(**env) as first:
            assert first.backend.models.pull()
            assert wait_for_state(first, {"ready", "failed"}, 60)["state"] == "ready"
        with served_here(**env, UPSCALERS=UPSCALERS) as served:
            assert served.backend.upscalers.missing()
            assert served.backend.models.pull()
            states = [wait_for_state(served, {"downloading", "loading", "ready"}, 60)["state"]]
            states.append(wait_for_state(served, {"ready", "failed"}, 60)["state"])
            assert states[-1] == "ready"
            assert not served.backend.upscalers.missing()


def test_in_distributed_mode_the_web_replicas_pull_brings_the_upscalers(
    hub_root: Path, tmp_path: Path, redis_server
):
    """A web replica of distributed mode (no worker needed): MODEL_ID on the share, UPSCALERS
    added; its pull downloads the missing files here for every worker, where before it only
    told the workers to load."""
    place_on_hub(hub_root)
    with LocalHub(hub_root) as hub:
        env = model_service_env(hub.url, tmp_path / "share", tmp_path)
        with served_here(**env) as first:
            assert first.backend.models.pull()
            assert wait_for_state(first, {"ready", "failed"}, 60)["state"] == "ready"
        broker = {"JOB_BROKER_URL": redis_server.url}
        with replica_here(**env, **broker, UPSCALERS=UPSCALERS) as replica:
            assert replica.backend.upscalers.missing()
            assert replica.backend.models.pull()
            deadline = time.monotonic() + 60
            while replica.backend.upscalers.missing():
                assert time.monotonic() < deadline, "the replica's pull fetched no upscaler"
                time.sleep(0.05)
