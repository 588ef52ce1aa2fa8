"""The SDXL layout (two text encoders, two tokenizers): a loader of testorg/tiny-sdxl pulls
its files from the local hub (the second encoder and tokenizer among them, no other format),
and /generate answers from it through Django's whole stack, in process. The pull route itself
is held by the SD modules (tests/imagegen/model/test_pull_lifecycle.py)."""

import dataclasses

from django.test import Client

from imagegen.model.loader import ModelLoader
from tests.support.loaders import new_loader, serve, wait_for
from tests.support.model_service import SDXL_REPO


def test_tiny_sdxl_cold_pull_then_generate(hub, share, tmp_path, monkeypatch):
    sd = new_loader(hub, share, tmp_path / "cache")
    loader = ModelLoader(dataclasses.replace(sd.source, model_id=SDXL_REPO), "cpu")
    assert loader.pull()
    assert wait_for(loader, {"ready", "failed"}) == "ready", loader.status()
    model = share / "testorg--tiny-sdxl"
    placed = {p.relative_to(model).as_posix() for p in model.rglob("*") if p.is_file()}
    assert {"text_encoder_2/model.fp16.safetensors", "tokenizer_2/vocab.json"} <= placed
    assert not [f for f in placed if f.endswith((".bin", ".msgpack", ".onnx"))]
    serve(loader, tmp_path / "images", monkeypatch)
    response = Client().post("/generate", {"prompt": "a boat", "seed": "1"})
    assert response.status_code == 200, response.content
    assert response.content.startswith(b"\x89PNG")
