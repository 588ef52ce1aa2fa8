"""The SDXL layout (two text encoders, two tokenizers) pulls and generates the same way."""

import requests

from tests.support.model_service import SDXL_REPO, pull_until_ready


def test_tiny_sdxl_cold_pull_then_generate(start_app, share):
    app = start_app(MODEL_ID=SDXL_REPO)
    pull_until_ready(app)
    model = share / "testorg--tiny-sdxl"
    placed = {p.relative_to(model).as_posix() for p in model.rglob("*") if p.is_file()}
    assert {"text_encoder_2/model.fp16.safetensors", "tokenizer_2/vocab.json"} <= placed
    assert not [f for f in placed if f.endswith((".bin", ".msgpack", ".onnx"))]
    response = requests.post(app.url("/generate"), data={"prompt": "a boat", "seed": "1"})
    assert response.status_code == 200
    assert response.content.startswith(b"\x89PNG")
