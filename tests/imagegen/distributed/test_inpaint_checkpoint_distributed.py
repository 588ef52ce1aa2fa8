"""INPAINT_MODEL_ID in distributed mode: a web replica (its routes served in this process) and
a worker process over a real Redis, the tiny 9-channel checkpoint pulled through the replica
onto the share. The worker inpaints on
the checkpoint's UNet and says so, keeps the pixels beyond the mask, and goes back to the
base UNet for img2img. The rules in detail, in process:
tests/imagegen/model/test_inpaint_checkpoint.py."""

from pathlib import Path

import requests

from tests.imagegen.generation.test_edits import (
    assert_kept_beyond_the_edge_and_repainted,
    mask_image,
    png,
    source_image,
)
from tests.support.distributed import Stack, replica_here
from tests.support.local_hub import LocalHub
from tests.support.model_service import (
    PULL_TIMEOUT,
    SD_INPAINT_REPO,
    model_service_env,
    pull_until_ready,
)


def edit(url: str, *, mask: bool) -> requests.Response:
    files = {"image": ("in.png", png(source_image()), "image/png")}
    if mask:
        files["mask"] = ("mask.png", png(mask_image()), "image/png")
    fields = {"prompt": "a red door", "seed": "4", "steps": "3", "strength": "1"}
    return requests.post(f"{url}/generate", data=fields, files=files, timeout=120)


def test_a_worker_inpaints_on_the_checkpoints_unet_and_img2img_on_the_base(
    hub_root: Path, tmp_path: Path
):
    with LocalHub(hub_root) as hub:
        env = model_service_env(hub.url, tmp_path / "share", tmp_path)
        with Stack({**env, "INPAINT_MODEL_ID": SD_INPAINT_REPO}, tmp_path) as stack:
            stack.start(replicas=0, workers=1)
            with replica_here(**stack.env) as replica:
                status = pull_until_ready(replica, timeout=PULL_TIMEOUT["distributed"])
                assert status["inpaint"]["model_id"] == SD_INPAINT_REPO
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
