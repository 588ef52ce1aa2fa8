"""webuiapi's img2img and png_info, unchanged, against the service over HTTP: with and
without `mask_image` (the kept pixels exact, the repainted area changed, the size, the same
seed giving the same picture), with one in both job modes (an edit's inputs reach the worker
so, mask or not; the rendering is the same code in either mode); /progress and /interrupt and
/skip over an img2img job; png-info reading back what was made; an identical retry joining
its twin. What each A1111 field does in detail is tested in process
(tests/imagegen/api/test_a1111_img2img.py)."""

import threading
import time

import numpy as np
import pytest
import requests
import webuiapi
from PIL import Image

from tests.imagegen.api.clients.conftest import (
    TOKEN,
    cancel,
    jobs,
    settle,
    start_blocker,
    wait_until,
)
from tests.support.processes import AppServer

SIZE = 64
SQUARE = (24, 24, 40, 40)  # the mask's marked square; its blurred edge reaches 8 further


def webui(app: AppServer, username: str = "webui") -> webuiapi.WebUIApi:
    return webuiapi.WebUIApi(baseurl=app.url("/sdapi/v1"), username=username, password=TOKEN)


def noise(size: tuple[int, int] = (SIZE, SIZE)) -> Image.Image:
    pixels = np.random.default_rng(11).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    return Image.fromarray(pixels, "RGB")


def square_mask() -> Image.Image:
    mask = Image.new("L", (SIZE, SIZE))
    mask.paste(255, SQUARE)
    return mask


def far_from_square() -> np.ndarray:
    ys, xs = np.indices((SIZE, SIZE))
    left, top, right, bottom = SQUARE
    dx = np.maximum(np.maximum(left - xs, xs - (right - 1)), 0)
    dy = np.maximum(np.maximum(top - ys, ys - (bottom - 1)), 0)
    return dx * dx + dy * dy > 8 * 8


def edit(api: webuiapi.WebUIApi, **fields) -> np.ndarray:
    sent = {"prompt": "webui door", "seed": 3, "steps": 2, "width": SIZE, "height": SIZE}
    result = api.img2img(images=[noise()], **(sent | fields))
    (image,) = result.images
    assert image.size == (SIZE, SIZE)
    return np.asarray(image.convert("RGB"))


@pytest.mark.both_modes
def test_img2img_with_a_mask_repaints_only_the_marked_area(app):
    """webuiapi's defaults: only masked (inpaint_full_res) with padding 0, mask_blur 4."""
    api = webui(app)
    out = edit(api, mask_image=square_mask(), denoising_strength=1)
    sent, far = np.asarray(noise()), far_from_square()
    assert (out[far] == sent[far]).all()
    left, top, right, bottom = SQUARE
    assert (out[top:bottom, left:right] != sent[top:bottom, left:right]).any(axis=-1).mean() > 0.9
    assert (edit(api, mask_image=square_mask(), denoising_strength=1) == out).all()  # same seed
    (job, *_) = jobs(app, "webui door")
    assert job["parameters"]["edit"]["only_masked"]["size"] == [SIZE, SIZE]


def test_img2img_without_a_mask_changes_the_whole_picture(app):
    api = webui(app)
    out = edit(api, denoising_strength=0.6)
    assert (out != np.asarray(noise())).any(axis=-1).mean() > 0.9
    assert (edit(api, denoising_strength=0.6) == out).all()  # same seed, same picture
    assert (edit(api, denoising_strength=0.6, seed=4) != out).any()


def test_png_info_reads_back_what_img2img_made(app):
    api = webui(app)
    made = api.img2img(images=[noise()], prompt="webui info", seed=8, steps=2, width=SIZE,
                       height=SIZE, denoising_strength=0.5)  # fmt: skip
    read = api.png_info(made.images[0])
    assert read.info == made.info["infotexts"][0]
    assert read.parameters["Prompt"] == "webui info" and read.parameters["Seed"] == "8"
    assert read.parameters["Denoising strength"] == "0.5"


class Background:
    """An img2img call in a thread, as a UI makes it while it polls /progress."""

    def __init__(self, api: webuiapi.WebUIApi, **fields) -> None:
        self.result = self.error = None
        self.thread = threading.Thread(target=self._run, args=(api, fields))
        self.thread.start()

    def _run(self, api, fields) -> None:
        try:
            self.result = api.img2img(images=[noise((128, 128))], denoising_strength=1, **fields)
        except Exception as error:
            self.error = error

    def join(self):
        self.thread.join(60)
        assert not self.thread.is_alive()
        if self.error:
            raise self.error
        return self.result


@pytest.mark.both_modes
def test_progress_follows_an_img2img_and_interrupt_stops_it(app):
    api = webui(app)
    call = Background(api, prompt="webui long edit", steps=400, width=128, height=128)
    seen = wait_until(lambda: (p := api.get_progress())["state"]["sampling_step"] >= 2 and p)
    assert seen["state"]["sampling_steps"] == 400  # strength 1: every step runs
    assert seen["state"]["job_count"] == 1 and 0 < seen["progress"] < 0.5
    assert api.interrupt() == {}
    assert call.join().images == []
    assert {j["state"] for j in jobs(app, "webui long edit")} == {"cancelled"}


def test_skip_stops_the_running_img2img_and_the_batch_goes_on(app):
    api = webui(app)
    call = Background(api, prompt="webui skip edit", batch_size=2, seed=100, steps=60,
                      width=64, height=64)  # fmt: skip
    wait_until(lambda: api.get_progress()["state"]["sampling_step"] >= 1)
    assert api.skip() == {}
    result = call.join()
    assert result.info["all_seeds"] == [101] and len(result.images) == 1
    by_seed = {j["parameters"]["seed"]: j["state"] for j in jobs(app, "webui skip edit")}
    assert by_seed == {100: "cancelled", 101: "succeeded"}


@pytest.mark.both_modes
def test_an_identical_img2img_from_the_same_client_joins_its_twin(open_app: AppServer):
    settle(open_app)
    blocker = start_blocker(open_app)
    body = {"prompt": "dup edit", "init_images": [webuiapi.b64_img(noise())], "steps": 2,
            "denoising_strength": 0.5}  # fmt: skip
    url = open_app.url("/sdapi/v1/img2img")

    def post(who: str) -> requests.Response:
        return requests.post(url, json=body, headers={"Authorization": f"Bearer {who}"})

    calls = [Call(post, "alice")]
    wait_until(lambda: len(jobs(open_app, "dup edit")) == 1)
    calls += [Call(post, "alice")]
    time.sleep(0.5)
    assert len(jobs(open_app, "dup edit")) == 1  # the retry joined
    calls += [Call(post, "bob")]  # another client: its own job
    wait_until(lambda: len(jobs(open_app, "dup edit")) == 2)
    cancel(open_app, blocker)
    first, twin, stranger = (call.outcome() for call in calls)
    for answer in (first, twin, stranger):
        assert answer.status_code == 200, answer.text
    assert first.json()["images"] == twin.json()["images"]
    assert len(jobs(open_app, "dup edit")) == 2
    settle(open_app)


class Call(threading.Thread):
    def __init__(self, function, *args) -> None:
        super().__init__()
        self.function, self.args = function, args
        self.result = self.error = None
        self.start()

    def run(self) -> None:
        try:
            self.result = self.function(*self.args)
        except Exception as error:
            self.error = error

    def outcome(self):
        self.join(60)
        assert not self.is_alive()
        if self.error:
            raise self.error
        return self.result
