"""A dedicated inpainting checkpoint (INPAINT_MODEL_ID) on the real tiny pipelines, in process
through Django's whole stack: the pull fetches its UNet folder only, an inpainting runs on its
9-channel UNet and says so, img2img and text-to-image stay on the base UNet, one UNet is in
memory at a time, /model/status says where it stands, and a checkpoint that does not fit the
base fails the pull naming the setting."""

import gc
import threading
import time
import weakref
from pathlib import Path

import pytest
import torch
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from imagegen.generation.stop_points import stop_points, stoppable_modules
from imagegen.model import loader as loaders
from imagegen.model import share as shares
from imagegen.model.edit_pipelines import edit_pipeline
from imagegen.model.inpaint import check_fits, parse_inpaint
from imagegen.model.loader import ModelLoader
from imagegen.model.pipeline import load_unet
from imagegen.model.share import model_path
from tests.imagegen.generation.test_edits import (
    SQUARE,
    assert_kept_beyond_the_edge_and_repainted,
    edit,
    pixels,
)
from tests.support.loaders import new_loader, ready_loader, serve, wait_for
from tests.support.model_service import SD_INPAINT_REPO, SD_REPO, SDXL_REPO
from tests.support.tiny_adapters import KOHYA_FILE, LORA_REPO, build_adapter_repos

FOLDER = "inpaint/testorg--tiny-sd-inpainting"


@pytest.fixture
def loader(hub, share: Path, tmp_path: Path) -> ModelLoader:
    return ready_loader(hub, share, tmp_path / "cache", inpaint=SD_INPAINT_REPO)


@pytest.fixture
def client(loader, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Client:
    serve(loader, tmp_path / "images", monkeypatch)
    return Client()


def unets_alive() -> int:
    """UNets in this process's memory (other tests' loaders' among them)."""
    from diffusers import UNet2DConditionModel

    gc.collect()
    return sum(type(o) is UNet2DConditionModel for o in gc.get_objects())


def test_the_pull_fetches_the_checkpoints_unet_folder_only_into_the_models_directory(
    loader, share: Path
):
    manifest = loader.source.complete_manifest()
    assert manifest is not None and manifest.inpaint is not None
    assert (manifest.inpaint.repo, manifest.inpaint.folder) == (SD_INPAINT_REPO, FOLDER)
    theirs = sorted(f.path for f in manifest.files if f.path.startswith("inpaint/"))
    assert theirs == [
        f"{FOLDER}/unet/config.json",
        f"{FOLDER}/unet/diffusion_pytorch_model.fp16.safetensors",
    ]
    assert not model_path(share, SD_INPAINT_REPO).exists()  # no copy of a model of its own
    status = loader.status()
    assert status.weights_on_share
    assert status.inpaint is not None
    assert status.inpaint.model_dump() == {
        "model_id": SD_INPAINT_REPO, "revision": "main", "commit": manifest.inpaint.commit,
        "state": "on_share",
    }  # fmt: skip


def test_an_inpainting_runs_on_the_checkpoints_unet_and_keeps_the_pixels_beyond_the_mask(
    loader, client
):
    answer = edit(client, steps="3", strength="1")
    assert answer.status_code == 200, answer.content
    assert answer["X-Inpaint-Model"] == SD_INPAINT_REPO
    record = client.get(f"/images/{answer['X-Image-Id']}").json()["parameters"]
    assert record["edit"]["inpaint_model"] == {
        "model_id": SD_INPAINT_REPO, "revision": loader.loaded_inpaint.commit,
    }  # fmt: skip
    assert record["model_id"] == SD_REPO  # the text encoders and the VAE are the base's
    pipe = loader.pipeline(60)
    assert pipe.unet.config.in_channels == 9
    assert loader.status().inpaint.state == "loaded"
    assert_kept_beyond_the_edge_and_repainted(answer.content)
    assert edit(client, steps="3", strength="1").content == answer.content  # same seed


def test_the_checkpoints_inpainting_differs_from_the_base_unets_with_the_same_seed(
    hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    answers = {}
    for name, inpaint in (("base", ""), ("checkpoint", SD_INPAINT_REPO)):
        share = tmp_path / f"share-{name}"
        share.mkdir()
        loaded = ready_loader(hub, share, tmp_path / f"cache-{name}", inpaint=inpaint)
        serve(loaded, tmp_path / f"images-{name}", monkeypatch)
        answers[name] = edit(Client(), steps="3", strength="1")
        assert answers[name].status_code == 200, answers[name].content
    assert "X-Inpaint-Model" not in answers["base"]
    assert answers["checkpoint"]["X-Inpaint-Model"] == SD_INPAINT_REPO
    base, checkpoint = pixels(answers["base"].content), pixels(answers["checkpoint"].content)
    left, top, right, bottom = SQUARE
    assert (base[top:bottom, left:right] != checkpoint[top:bottom, left:right]).any()


def test_img2img_and_text_to_image_run_on_the_base_unet(loader, client):
    assert edit(client, steps="2").status_code == 200  # the checkpoint's UNet in memory
    for fields in ({"mask": False}, {}):
        if fields:  # text-to-image
            answer = client.post("/generate", {"prompt": "a red door", "seed": "4"})
        else:
            answer = edit(client, mask=False, steps="2", strength="0.5")
        assert answer.status_code == 200, answer.content
        assert "X-Inpaint-Model" not in answer
        record = client.get(f"/images/{answer['X-Image-Id']}").json()["parameters"]
        assert "inpaint_model" not in (record.get("edit") or {})
        assert loader.pipeline(60).unet.config.in_channels == 4
        assert loader.status().inpaint.state == "on_share"
        assert edit(client, steps="2").status_code == 200  # and back, for the next kind


def test_one_unet_is_in_memory_at_a_time_and_every_pipeline_runs_it(loader, client):
    pipe = loader.pipeline(60)
    assert edit(client, mask=False, steps="2").status_code == 200  # stop points on the base's
    base, alive = weakref.ref(pipe.unet), unets_alive()
    assert edit(client, steps="2").status_code == 200
    assert base() is None  # freed, not kept beside the checkpoint's
    assert unets_alive() == alive and pipe.unet.config.in_channels == 9
    for inpaint in (False, True):
        assert edit_pipeline(pipe, inpaint=inpaint).unet is pipe.unet
    # The swapped-in UNet's blocks are stop points too, one hook each.
    points = stop_points(pipe)
    assert set(stoppable_modules(pipe)) <= set(points.modules)
    assert all(len(m._forward_pre_hooks) == 1 for m in stoppable_modules(pipe))
    checkpoint = weakref.ref(pipe.unet)
    assert edit(client, mask=False, steps="2").status_code == 200
    assert checkpoint() is None
    assert unets_alive() == alive and pipe.unet.config.in_channels == 4


def test_the_resident_unet_is_freed_before_the_other_is_loaded(
    hub, share: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """So the peak stays about one UNet: the old one is gone when the new one's load starts."""
    resident_when_loading = []

    def load(*args, **kwargs):
        gc.collect()
        resident_when_loading.append(resident())
        return load_unet(*args, **kwargs)

    monkeypatch.setattr(loaders, "load_unet", load)
    loaded = ready_loader(hub, share, tmp_path / "cache", inpaint=SD_INPAINT_REPO)
    resident = weakref.ref(loaded.pipeline(60).unet)
    serve(loaded, tmp_path / "images", monkeypatch)
    assert edit(Client(), steps="2").status_code == 200
    assert resident_when_loading == [None]


def test_a_share_pulled_without_the_checkpoint_is_incomplete_until_a_pull_fetches_it(
    hub, share: Path, tmp_path: Path
):
    ready_loader(hub, share, tmp_path / "cache-0")
    configured = new_loader(hub, share, tmp_path / "cache-1", inpaint=SD_INPAINT_REPO)
    status = configured.status()
    assert not status.weights_on_share
    assert status.inpaint is not None and status.inpaint.state == "not_on_share"
    hub.reset_log()
    assert configured.pull()
    assert wait_for(configured, {"ready", "failed"}) == "ready", configured.status()
    fetched = {path.split("/resolve/")[0] for path in hub.file_gets()}
    assert fetched == {f"/{SD_INPAINT_REPO}"}  # only what was missing: its UNet


def test_a_unet_that_is_no_inpainting_unet_fails_the_pull_naming_the_setting(
    hub, share: Path, tmp_path: Path
):
    loaded = new_loader(hub, share, tmp_path / "cache", inpaint=SD_REPO)  # 4 channels
    assert loaded.pull()
    assert wait_for(loaded, {"ready", "failed"}) == "failed"
    error = loaded.status().error
    assert "INPAINT_MODEL_ID" in error and "4 input channels" in error and "9" in error
    # Failed by the pull itself: no manifest calls the share's copy complete.
    assert loaded.source.complete_manifest() is None
    assert loaded.status().weights_on_share is False


def test_a_checkpoint_the_hub_does_not_have_fails_the_pull_naming_the_setting(
    hub, share: Path, tmp_path: Path
):
    loaded = new_loader(hub, share, tmp_path / "cache", inpaint="testorg/no-such-inpainting")
    assert loaded.pull()
    assert wait_for(loaded, {"ready", "failed"}) == "failed"
    error = loaded.status().error
    assert "INPAINT_MODEL_ID" in error and "testorg/no-such-inpainting" in error
    assert shares.read_manifest(loaded.source.path) is None


def test_a_checkpoint_of_another_base_model_is_refused():
    base = {"in_channels": 4, "cross_attention_dim": 768}
    with pytest.raises(ValueError, match=r"INPAINT_MODEL_ID.*cross-attention width is 2048"):
        check_fits({"in_channels": 9, "cross_attention_dim": 2048}, base)
    check_fits({"in_channels": 9, "cross_attention_dim": 768}, base)


def test_the_setting_must_name_a_hub_repo():
    assert parse_inpaint("", "main") is None
    assert parse_inpaint(" org/name ", "") == parse_inpaint("org/name", "main")
    with pytest.raises(ImproperlyConfigured, match="INPAINT_MODEL_ID: 'not a repo'"):
        parse_inpaint("not a repo", "main")


def test_without_a_checkpoint_status_says_none_and_the_base_unet_inpaints(
    hub, share: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    loaded = ready_loader(hub, share, tmp_path / "cache")
    assert loaded.status().inpaint is None
    serve(loaded, tmp_path / "images", monkeypatch)
    answer = edit(Client(), steps="2")
    assert answer.status_code == 200 and "X-Inpaint-Model" not in answer
    assert loaded.pipeline(60).unet.config.in_channels == 4


def test_the_adapters_are_fused_into_the_checkpoints_unet_too(
    hub, hub_root: Path, share: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """MODEL_ADAPTERS (a LoRA made for the base) change the checkpoint's UNet as they change
    the base's: its LoRA'd weights differ from the checkpoint as stored (the few-step presets
    then hold for inpaintings too); its own 9-channel input layer is as stored."""
    build_adapter_repos(hub_root, sd_repo=SD_REPO, sdxl_repo=SDXL_REPO)
    adapters = f"{LORA_REPO}:{KOHYA_FILE}"
    loaded = ready_loader(
        hub, share, tmp_path / "cache", inpaint=SD_INPAINT_REPO, adapters=adapters
    )
    serve(loaded, tmp_path / "images", monkeypatch)
    assert edit(Client(), steps="2").status_code == 200
    fused = loaded.pipeline(60).unet
    assert fused.config.in_channels == 9
    stored = load_unet(
        loaded.source.path / FOLDER, variant="fp16", device="cpu",
        pipeline_class=type(loaded.pipeline(60)),
    )  # fmt: skip
    stored_weights, fused_weights = stored.state_dict(), fused.state_dict()
    changed = {n for n, w in stored_weights.items() if not torch.equal(w, fused_weights[n])}
    assert changed  # the LoRA's layers
    assert "conv_in.weight" not in changed  # the checkpoint's own 9-channel input, no target


def test_a_checkpoint_that_cannot_load_fails_its_job_and_puts_the_base_back(loader, client):
    """One bad file fails the inpaintings that need it, naming the setting; the base UNet is
    back in the pipeline for every other job."""
    weights = next((loader.source.path / FOLDER / "unet").glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:100])  # truncated on the share
    answer = edit(client, steps="2")
    assert answer.status_code == 500, answer.content
    assert "INPAINT_MODEL_ID's UNet could not be loaded" in answer.json()["error"]["message"]
    pipe = loader.pipeline(60)
    assert pipe.unet is not None and pipe.unet.config.in_channels == 4
    assert client.post("/generate", {"prompt": "a red door", "seed": "4"}).status_code == 200


def test_a_cancel_that_comes_while_the_model_is_awaited_stops_the_job_before_any_swap(
    loader, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A swap, once begun, runs to its end as a load does; so a cancel asked before it is
    seen first, and no UNet is loaded for a job nobody wants."""
    queue = serve(loader, tmp_path / "images", monkeypatch)
    entered, release = threading.Event(), threading.Event()
    awaited = loader.pipeline

    def pipeline(timeout: float):
        entered.set()
        release.wait(30)
        return awaited(timeout)

    monkeypatch.setattr(loader, "pipeline", pipeline)
    answer = edit(Client(), steps="2", **{"async": "true"})
    assert answer.status_code == 202, answer.content
    job_id = answer.json()["id"]
    assert entered.wait(30)
    queue.cancel(job_id)
    release.set()
    deadline = time.monotonic() + 30
    while queue.get(job_id).state.value not in {"cancelled", "failed", "succeeded"}:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert queue.get(job_id).state.value == "cancelled"
    assert loader.status().inpaint.state == "on_share"  # the checkpoint's UNet never loaded
