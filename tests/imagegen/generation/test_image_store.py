"""The image store's writes: a record never exists without its complete image."""

import io
import json
import os

import pytest
from PIL import Image

from imagegen.generation.images import GenerationParameters, ImageStore, LoraRan, png_bytes

PARAMETERS = GenerationParameters(
    prompt="p", negative_prompt=None, steps=2, guidance=7.0, width=8, height=8, seed=1,
    scheduler="PNDMScheduler", model_id="org/model", revision="abc",
)  # fmt: skip


def png() -> bytes:
    return png_bytes(Image.new("RGB", (8, 8), "red"), PARAMETERS)


def test_a_crash_while_writing_the_record_leaves_no_record(tmp_path, monkeypatch):
    store = ImageStore(tmp_path)
    real_replace = os.replace

    def crash_on_record(source, target):
        if str(target).endswith(".json"):
            raise OSError("disk gone")
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", crash_on_record)
    with pytest.raises(OSError):
        store.save(png(), PARAMETERS, device="cpu", timings={})
    monkeypatch.undo()
    assert store.page(limit=10) == []
    assert not [p for p in tmp_path.iterdir() if p.name.endswith((".partial", ".json"))]


def test_a_crash_while_writing_the_png_leaves_nothing(tmp_path, monkeypatch):
    store = ImageStore(tmp_path)
    monkeypatch.setattr(os, "replace", lambda s, t: (_ for _ in ()).throw(OSError("full")))
    with pytest.raises(OSError):
        store.save(png(), PARAMETERS, device="cpu", timings={})
    assert list(tmp_path.iterdir()) == []


def test_saved_records_round_trip_and_list_newest_first(tmp_path):
    store = ImageStore(tmp_path)
    first = store.save(png(), PARAMETERS, device="cpu", timings={"generation_seconds": 1.23456})
    second = store.save(png(), PARAMETERS, device="cpu", timings={})
    assert store.get(first.id) == first
    assert first.timings == {"generation_seconds": 1.235}
    assert [r.id for r in store.page(limit=10)] == [second.id, first.id]
    assert [r.id for r in store.page(limit=10, before=second.id)] == [first.id]
    assert store.png_path(first.id).read_bytes() == png()
    assert store.get("../../etc/passwd") is None


def test_a_record_names_its_key_only_when_it_has_one_and_a_page_can_pick_a_keys_own(tmp_path):
    store = ImageStore(tmp_path)
    open_one = store.save(png(), PARAMETERS, device="cpu", timings={})
    alices = store.save(png(), PARAMETERS, device="cpu", timings={}, key="alice")
    assert "key" not in open_one.model_dump()  # answers and records as before keys
    assert store.get(alices.id).model_dump()["key"] == "alice"
    assert [r.id for r in store.page(limit=10, key="alice")] == [alices.id]
    assert [r.id for r in store.page(limit=10)] == [alices.id, open_one.id]


def test_a_keys_listing_reads_its_index_not_every_record(tmp_path, monkeypatch):
    """A key's images are listed from its index (by-key/<key>/<id>, empty files): the other
    keys' records are not read. A share written before the index is indexed once, whole."""
    store = ImageStore(tmp_path)
    bobs = [store.save(png(), PARAMETERS, device="cpu", timings={}, key="bob") for _ in range(20)]
    alices = [store.save(png(), PARAMETERS, device="cpu", timings={}, key="alice")
              for _ in range(2)]  # fmt: skip
    read: list[str] = []
    get = ImageStore.get
    monkeypatch.setattr(ImageStore, "get", lambda self, i: read.append(i) or get(self, i))
    newest_first = [r.id for r in reversed(alices)]
    assert [r.id for r in store.page(limit=10, key="alice")] == newest_first
    assert [r.id for r in store.records(key="alice")] != []
    read.clear()
    assert [r.id for r in store.page(limit=10, key="alice")] == newest_first
    assert {r.id for r in store.records(key="alice")} == set(newest_first)
    assert set(read) == set(newest_first)  # not one of bob's 20
    # A deleted image leaves its key's index too.
    store.delete(alices[0].id)
    assert [r.id for r in store.page(limit=10, key="alice")] == [alices[1].id]
    assert not (tmp_path / "by-key" / "alice" / alices[0].id).exists()
    # A share of records written before the index: indexed whole at the first listing.
    for marker in (tmp_path / "by-key").rglob("*"):
        if marker.is_file():
            marker.unlink()
    assert len(store.page(limit=50, key="bob")) == len(bobs)
    read.clear()
    assert len(store.page(limit=50, key="bob")) == len(bobs) and len(read) == len(bobs)


def test_a_key_index_takes_only_a_keys_name(tmp_path):
    with pytest.raises(ValueError, match="not a key's name"):
        ImageStore(tmp_path).page(limit=1, key="../x")


def test_a_record_keeps_its_loras_and_weights_and_one_without_names_none(tmp_path):
    """The record and the PNG's `imagegen` text keep the LoRAs an image ran (the page's cards
    show them); an image made without one carries no `loras` key, as before."""
    store = ImageStore(tmp_path)
    with_loras = PARAMETERS.model_copy(
        update={"lora_hashes": "style: 0123456789ab",
                "loras": (LoraRan(name="style", weight=0.5),)}
    )  # fmt: skip
    saved = store.save(png_bytes(Image.new("RGB", (8, 8)), with_loras), with_loras,
                       device="cpu", timings={})  # fmt: skip
    stored = json.loads((tmp_path / f"{saved.id}.json").read_text())
    assert stored["parameters"]["loras"] == [{"name": "style", "weight": 0.5}]
    text = json.loads(Image.open(store.png_path(saved.id)).text["imagegen"])
    assert text["loras"] == [{"name": "style", "weight": 0.5}]
    assert store.get(saved.id) == saved
    assert "loras" not in PARAMETERS.model_dump()
    assert "loras" not in json.loads(Image.open(io.BytesIO(png())).text["imagegen"])
