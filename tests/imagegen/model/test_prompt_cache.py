"""PROMPT_CACHE: a prompt sent again skips the text encoders and makes the same bytes; the cache
is bounded, keyed by everything the encoding depends on, and goes with its model. On the real
tiny pipeline, in process."""

from pathlib import Path

import numpy
import pytest
import requests

from imagegen.generation.images import GenerationParameters
from imagegen.generation.render import render
from imagegen.model.pipeline import LoadOptions, load_pipeline
from imagegen.model.prompt_cache import cache_of
from tests.support.in_process import LoopbackApp, ready_here
from tests.support.model_service import SD_REPO


def parameters(prompt: str = "a fox", **changed) -> GenerationParameters:
    fields = dict(
        prompt=prompt, negative_prompt=None, steps=1, guidance=5.0, width=64, height=64, seed=3,
        scheduler="PLMS", model_id=SD_REPO, revision=None,
    )  # fmt: skip
    return GenerationParameters(**{**fields, **changed})


class Counted:
    """The text encoder's forward calls: one per prompt encoded (two with guidance)."""

    def __init__(self, pipe) -> None:
        self.calls = 0
        pipe.text_encoder.register_forward_pre_hook(self.count)

    def count(self, *_) -> None:
        self.calls += 1


def pixels(pipe, chosen: GenerationParameters) -> numpy.ndarray:
    rendered = render(
        pipe, chosen, scheduler=None, device="cpu", home="cpu",
        on_step=lambda done, total: None, stop_requested=lambda: False,
    )  # fmt: skip
    return numpy.asarray(rendered.image)


@pytest.fixture(scope="module")
def pipes(hub_root: Path):
    cached = load_pipeline(hub_root / SD_REPO, variant="fp16", device="cpu",
                           options=LoadOptions(prompt_cache=2))  # fmt: skip
    plain = load_pipeline(hub_root / SD_REPO, variant="fp16", device="cpu")
    return cached, plain


def test_a_prompt_sent_again_skips_the_encoder_and_makes_the_same_bytes(pipes):
    cached, plain = pipes
    encoder = Counted(cached)
    first = pixels(cached, parameters("a lighthouse at dusk", seed=1))
    encoded = encoder.calls
    assert encoded == 2  # the prompt and the empty negative prompt (guidance on)
    again = pixels(cached, parameters("a lighthouse at dusk", seed=2))
    assert encoder.calls == encoded  # nothing encoded the second time
    assert numpy.array_equal(first, pixels(plain, parameters("a lighthouse at dusk", seed=1)))
    assert numpy.array_equal(again, pixels(plain, parameters("a lighthouse at dusk", seed=2)))


def test_what_changes_the_encoding_encodes_again(pipes):
    cached, _ = pipes
    encoder = Counted(cached)
    pixels(cached, parameters("a red door"))
    before = encoder.calls
    pixels(cached, parameters("a red door", negative_prompt="blurry"))
    assert encoder.calls == before + 2
    pixels(cached, parameters("a red door", guidance=1.0))  # guidance off: the prompt alone
    assert encoder.calls == before + 3


def test_the_least_recently_used_encoding_is_dropped_past_the_bound(pipes):
    cached, _ = pipes  # PROMPT_CACHE=2
    encoder = Counted(cached)
    for prompt in ("one", "two", "one", "three", "one", "two"):
        pixels(cached, parameters(prompt, guidance=1.0))
    # one, two: encoded; one: kept; three: drops two; one: kept; two: encoded again.
    assert encoder.calls == 4
    assert len(cache_of(cached)) == 2


def test_the_service_keeps_encodings_by_default_and_a_freed_model_takes_them(
    hub_root: Path, tmp_path: Path
):
    with ready_here(hub_root, tmp_path) as app:
        generate(app, seed="1")
        generate(app, seed="2")
        loader = app.backend.loader
        cache = cache_of(loader.pipeline(5))
        assert cache is not None and (cache.misses, cache.hits) == (1, 1)
        assert loader.free()
        assert requests.post(app.url("/model/pull"), timeout=30).status_code in (200, 202)
        generate(app, seed="1")
        assert cache_of(loader.pipeline(5)) is not cache


def generate(app: LoopbackApp, **fields: str) -> None:
    answer = requests.post(app.url("/generate"), data={"prompt": "a fox", **fields}, timeout=120)
    assert answer.status_code == 200, answer.text


def test_prompt_cache_zero_keeps_none(pipes):
    _, plain = pipes
    assert cache_of(plain) is None
