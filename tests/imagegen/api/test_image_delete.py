"""Deleting a stored image, in process: the store removes the PNG and its record (the record
first), and the service answers the record it removed or refuses what is not there. The route
over HTTP, in both job modes, is in test_jobs.py."""

import threading

import pytest

from imagegen import backend, services
from imagegen.backend import current_backend
from imagegen.errors import ImageNotFound
from imagegen.generation.images import ImageStore
from tests.imagegen.generation.test_image_store import PARAMETERS, png


@pytest.fixture
def store(tmp_path, monkeypatch) -> ImageStore:
    """This process's image store (OUTPUT_DIR) in a folder of the test's own."""
    images = ImageStore(tmp_path)
    monkeypatch.setattr(backend.current_backend(), "images", images)
    return images


def test_a_deleted_image_is_gone_from_disk_listing_and_records(store, tmp_path):
    kept = store.save(png(), PARAMETERS, device="cpu", timings={})
    doomed = store.save(png(), PARAMETERS, device="cpu", timings={})

    assert (
        services.image_delete(current_backend(), image_id=doomed.id) == doomed
    )  # the record it removed
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{kept.id}.json", f"{kept.id}.png"]
    assert store.get(doomed.id) is None
    assert [r.id for r in store.page(limit=10)] == [kept.id]
    with pytest.raises(ImageNotFound):  # a second delete finds nothing
        services.image_delete(current_backend(), image_id=doomed.id)


@pytest.mark.parametrize(
    "image_id", ["20260101T000000000000Z-abcdef", "nope", "../../etc/passwd", ""]
)
def test_an_unknown_or_malformed_id_is_image_not_found_and_touches_nothing(store, image_id):
    kept = store.save(png(), PARAMETERS, device="cpu", timings={})
    with pytest.raises(ImageNotFound) as refused:
        services.image_delete(current_backend(), image_id=image_id)
    assert refused.value.status == 404 and refused.value.message == "No such image"
    assert store.get(kept.id) == kept and store.png_path(kept.id).is_file()


def test_the_record_goes_first_so_a_listing_never_shows_one_without_its_png(store, monkeypatch):
    """A crash between the two removals leaves an orphan PNG (never listed), as a crash in
    save does, not a listed record whose image is gone."""
    image = store.save(png(), PARAMETERS, device="cpu", timings={})
    png_path = store.png_path(image.id)
    real_unlink = type(png_path).unlink

    def crash_on_png(path, missing_ok=False):
        if path.suffix == ".png":
            raise OSError("disk gone")
        real_unlink(path, missing_ok=missing_ok)

    monkeypatch.setattr(type(png_path), "unlink", crash_on_png)
    with pytest.raises(OSError):
        services.image_delete(current_backend(), image_id=image.id)
    monkeypatch.undo()
    assert store.page(limit=10) == [] and png_path.is_file()


def test_of_two_deletes_at_once_one_removes_and_the_other_is_not_found(store, monkeypatch):
    image = store.save(png(), PARAMETERS, device="cpu", timings={})
    both_read = threading.Barrier(2)
    real_get = ImageStore.get

    def get_then_wait(self, image_id):
        record = real_get(self, image_id)
        both_read.wait(timeout=5)  # each has read the record before either removes it
        return record

    monkeypatch.setattr(ImageStore, "get", get_then_wait)
    answers: list[object] = []

    def delete() -> None:
        try:
            answers.append(services.image_delete(current_backend(), image_id=image.id))
        except ImageNotFound as error:
            answers.append(error)

    threads = [threading.Thread(target=delete) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert sorted(type(a).__name__ for a in answers) == ["ImageNotFound", "ImageRecord"]
