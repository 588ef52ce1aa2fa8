"""The places of synchronous requests (imagegen.api.places), in process on a backend built
for the test: an edit refused a place (SYNC_WAITERS_MAX, read per request) is answered 503
before anything is queued and leaves none of its stored inputs behind."""

from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from imagegen import backend
from imagegen.api import places
from tests.imagegen.generation.test_edits import png, source_image


def test_an_edit_refused_a_waiting_place_leaves_no_input_stored(settings, tmp_path):
    settings.OUTPUT_DIR, settings.SYNC_WAITERS_MAX = tmp_path, 1
    with backend.installed(backend.build_backend()) as built, places.sync_waiter_place():
        image = SimpleUploadedFile("in.png", png(source_image((64, 64))), "image/png")
        response = Client().post("/generate", {"prompt": "an edit", "image": image})
        assert response.status_code == 503, response.content
        assert "SYNC_WAITERS_MAX" in response.json()["error"]["message"]
        assert int(response["Retry-After"]) > 0
        assert built.jobs.recent(1) == []  # nothing queued
        assert built.images.input_ages() == {}  # the input it stored is gone
    assert backend.current_backend() is not built  # the process's own again
