"""The image store's writes: a record never exists without its complete image."""

import os

import pytest
from PIL import Image

from imagegen.generation.images import GenerationParameters, ImageStore, png_bytes

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
