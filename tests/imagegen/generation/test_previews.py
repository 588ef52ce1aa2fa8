"""Live previews in this process: when a preview is made (PREVIEW_EVERY, PREVIEW_SECONDS, an
OpenAI stream's partial images), how small it is (approx and tiny), and, on the tiny pipeline
in both job modes (the in-process JobQueue; distributed mode's store on a real redis-server
with the worker's runtime on a thread), that a job keeps its latest preview and its partial
images, and that the final image is the same, byte for byte, with previews on or off."""

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from django.test import override_settings
from PIL import Image

from imagegen import backend
from imagegen.generation.images import ImageStore
from imagegen.generation.job_board import JobBoard, JobState
from imagegen.generation.jobs import JobQueue
from imagegen.generation.previews import (
    APPROX,
    OFF,
    TINY,
    Preview,
    Previewer,
    PreviewPolicy,
    partial_steps,
    preview_image,
)
from imagegen.generation.requests import GenerationRequest
from imagegen.model.loader import ModelLoader
from tests.support.loaders import pulled_loader
from tests.support.solo_worker import solo_worker

EVERY_STEP = PreviewPolicy(method=APPROX, every=1, seconds=0)
REQUEST = GenerationRequest(
    prompt="a forming harbour", steps=4, guidance=5.0, seed=9, size=(64, 64)
)


def latents(side: int = 8) -> torch.Tensor:
    return torch.randn(1, 4, side, side, generator=torch.Generator().manual_seed(1))


# -- when, and how small ----------------------------------------------------------------------


def test_partial_images_are_spread_over_the_steps_and_fewer_for_few_steps():
    assert partial_steps(2, 6) == {2, 4}
    assert partial_steps(3, 20) == {5, 10, 15}
    assert partial_steps(1, 4) == {2}
    assert partial_steps(3, 2) == {1}  # fewer steps than partials + 1: fewer partial images
    assert partial_steps(2, 1) == set()
    assert partial_steps(0, 20) == set()


def test_every_n_steps_at_most_once_per_interval_and_partial_steps_whatever_the_pace():
    every_other = Previewer(None, PreviewPolicy(every=2, seconds=0))
    made = [s for s in range(1, 7) if every_other.make(latents(), s, 6)]
    assert made == [2, 4, 6]
    paced = Previewer(None, PreviewPolicy(every=1, seconds=3600), forced={3, 5})
    found = [(s, p.partial) for s in range(1, 7) if (p := paced.make(latents(), s, 6))]
    assert found == [(1, None), (3, 0), (5, 1)]  # the first by the pace, then the forced
    off = Previewer(None, PreviewPolicy(method=OFF), forced={2})
    assert [s for s in range(1, 4) if off.make(latents(), s, 3)] == []


def test_a_preview_that_fails_is_logged_once_and_previews_stop_for_the_job(caplog):
    """The image matters more than its previews: latents the approximation raises on (here
    of five dimensions) fail once, are logged, and no later step tries again."""
    previewer = Previewer(None, EVERY_STEP)
    odd = torch.randn(1, 4, 8, 8, 2)
    assert [previewer.make(odd, s, 4) for s in range(1, 5)] == [None] * 4
    assert caplog.text.count("preview failed; no more previews for this job") == 1
    assert previewer.make(latents(), 4, 4) is None  # even good latents: stopped


@pytest.mark.parametrize("sdxl", [False, True])
def test_the_approximation_is_a_small_jpeg_a_quarter_of_the_output_side_or_less(sdxl):
    pipe = type("StableDiffusionXLPipeline" if sdxl else "StableDiffusionPipeline", (), {})()
    image = preview_image(latents(128), pipe=pipe, method=APPROX)  # a 1024x1024 image's
    assert image.size == (128, 128) and 128 <= 1024 / 4
    preview = Previewer(pipe, EVERY_STEP).make(latents(128), 1, 4)
    assert preview is not None and preview.media_type == "image/jpeg"
    assert len(preview.data) < 16_000
    assert Image.open(io.BytesIO(preview.data)).format == "JPEG"
    assert preview.data_url().startswith("data:image/jpeg;base64,")


def test_the_sdxl_factors_are_not_the_sd_ones():
    plain = preview_image(latents(), pipe=object(), method=APPROX)
    xl = preview_image(latents(), pipe=type("StableDiffusionXLPipeline", (), {})(), method=APPROX)
    assert plain.tobytes() != xl.tobytes()


def test_the_tiny_decoder_preview_is_at_most_256_pixels():
    from diffusers import AutoencoderTiny

    torch.manual_seed(0)
    vae = AutoencoderTiny(
        encoder_block_out_channels=(8, 8, 8, 8), decoder_block_out_channels=(8, 8, 8, 8),
        num_encoder_blocks=(1, 1, 1, 1), num_decoder_blocks=(1, 1, 1, 1),
    )  # fmt: skip
    image = preview_image(latents(128), pipe=SimpleNamespace(vae=vae), method=TINY)
    assert max(image.size) <= 256
    # Without a tiny decoder there is none, and previews stop for the job.
    previewer = Previewer(SimpleNamespace(vae=torch.nn.Linear(1, 1)), PreviewPolicy(method=TINY))
    assert previewer.make(latents(), 1, 2) is None
    assert previewer.make(latents(), 2, 2) is None


def test_previews_leave_the_latents_as_they_were():
    before = latents()
    kept = before.clone()
    Previewer(None, EVERY_STEP).make(before, 1, 1)
    assert torch.equal(before, kept)


# -- a job's previews, in both job modes --------------------------------------------------------


@pytest.fixture(scope="module")
def loader(hub_root: Path, tmp_path_factory: pytest.TempPathFactory) -> ModelLoader:
    return pulled_loader(hub_root, tmp_path_factory.mktemp("previews"))


@contextlib.contextmanager
def board_of(
    mode: str, loader: ModelLoader, images: Path, policy: PreviewPolicy, request
) -> Iterator[tuple[JobBoard, object]]:
    """The mode's board and a submit(request) -> job id, its jobs previewed by `policy`."""
    if mode == "in-process":
        with override_settings(MODEL_ID=loader.source.model_id, MODEL_ADAPTERS=()):
            rules = backend.rules_from_settings()
        jobs = JobQueue(loader, ImageStore(images), queue_max=4, load_timeout=60, keep=20,
                        rules=rules, previews=policy)  # fmt: skip
        yield jobs, lambda r: jobs.submit(r).id
        return
    with solo_worker(loader, images, request.getfixturevalue("redis_server")) as solo:
        solo.runtime.previews = policy
        yield solo.board, solo.submit


@pytest.fixture(params=["in-process", "distributed"])
def mode(request: pytest.FixtureRequest) -> str:
    return request.param


def run(board: JobBoard, submit, request: GenerationRequest) -> str:
    job_id = submit(request)
    view = board.wait(job_id, 120)
    assert view is not None and view.state is JobState.SUCCEEDED, view
    return job_id


def test_a_job_keeps_its_latest_preview_and_its_partial_images(mode, loader, tmp_path, request):
    with board_of(mode, loader, tmp_path / "images", EVERY_STEP, request) as (board, submit):
        job_id = run(board, submit, REQUEST.model_copy(update={"partial_images": 2}))
        view = board.lookup(job_id)
        latest = board.preview(job_id)
        assert view is not None and isinstance(latest, Preview)
        assert (latest.step, latest.steps, view.preview_step) == (4, 4, 4)
        assert max(Image.open(io.BytesIO(latest.data)).size) <= 64 // 4
        partials = [board.preview(job_id, partial=i) for i in range(3)]
        assert [p.step if p else None for p in partials] == [
            1,
            3,
            None,
        ]  # steps of partial_steps(2, 4)
        assert board.preview("no-such-job") is None


def test_the_final_image_is_the_same_with_previews_on_or_off(mode, loader, tmp_path, request):
    pngs = []
    for name, policy in (("on", EVERY_STEP), ("off", PreviewPolicy(method=OFF))):
        with board_of(mode, loader, tmp_path / name, policy, request) as (board, submit):
            job_id = run(board, submit, REQUEST)
            assert (board.preview(job_id) is None) == (policy.method == OFF)
            view = board.lookup(job_id)
            assert view is not None and view.image is not None
            pngs.append(ImageStore(tmp_path / name).png_path(view.image.id).read_bytes())
    assert pngs[0] == pngs[1]
