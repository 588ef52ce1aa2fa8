"""The image service's decisions, called in-process on a real tiny pipeline: what may start a
load, what a slow load answers, and how a synchronous generation ends. No server: a rule
here is checked in milliseconds to seconds."""

import time
from pathlib import Path

import pytest

from imagegen.errors import ModelLoading, ModelNotPulled
from tests.support.loaders import new_loader, wait_for


@pytest.fixture
def warm_share(hub, share: Path, tmp_path: Path) -> Path:
    first = new_loader(hub, share, tmp_path / "cache-first")
    assert first.pull()
    assert wait_for(first, {"ready", "failed"}) == "ready"
    return share


def test_checking_a_warm_share_starts_no_load(hub, warm_share, tmp_path):
    loader = new_loader(hub, warm_share, tmp_path / "cache")
    loader.check_loadable()  # no refusal: the weights are there
    time.sleep(0.2)
    assert loader.status().state == "not_started"  # and nothing began
    assert loader.pipeline(60) is not None
    assert loader.status().state == "ready"


def test_checking_an_empty_share_asks_for_a_pull(hub, share, tmp_path):
    loader = new_loader(hub, share, tmp_path / "cache")
    with pytest.raises(ModelNotPulled, match="POST /model/pull first"):
        loader.check_loadable()
    assert loader.status().state == "not_started"


def test_a_load_slower_than_the_wait_is_model_loading_and_goes_on(hub, warm_share, tmp_path):
    loader = new_loader(hub, warm_share, tmp_path / "cache")
    with pytest.raises(ModelLoading) as refused:
        loader.pipeline(0.001)
    assert refused.value.status == 503 and refused.value.retry_after
    assert loader.status().state == "loading"  # the load was not abandoned
    assert loader.pipeline(60) is not None
