"""MODEL_ADAPTERS, VAE_DECODER and VAE_DECODER_REPO that cannot work stop the service at start,
naming the variable and the rule (config/settings.py executed again with the environment)."""

import importlib
import os
import re
from collections.abc import Iterator

import pytest
from django.core.exceptions import ImproperlyConfigured

import config.settings


@pytest.fixture
def environment() -> Iterator[None]:
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)
    importlib.reload(config.settings)


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        (
            {"MODEL_ADAPTERS": "org/a/b:w.safetensors"},
            "'org/a/b' in 'org/a/b:w.safetensors' is not a hub repo id (org/name",
        ),
        ({"MODEL_ADAPTERS": "org--x/a:w.safetensors"}, "is not a hub repo id"),
        ({"MODEL_ADAPTERS": "org/a:../w.safetensors"}, "must be a path inside the repo"),
        ({"MODEL_ADAPTERS": "org/a:/w.safetensors"}, "must be a path inside the repo"),
        (
            {"MODEL_ADAPTERS": "org/a:w.safetensors:nan"},
            "scale in 'org/a:w.safetensors:nan' must be finite",
        ),
        (
            {"MODEL_ADAPTERS": "org/a:w.safetensors, org/a:w.safetensors:0.5"},
            "MODEL_ADAPTERS: org/a:w.safetensors is named twice",
        ),
        ({"VAE_DECODER": "small"}, "VAE_DECODER must be full or tiny, got 'small'"),
        (
            {"VAE_DECODER": "tiny", "VAE_DECODER_REPO": "taesd"},
            "VAE_DECODER_REPO must be a hub repo id (org/name",
        ),
    ],
)
def test_a_bad_adapter_or_decoder_setting_refuses_to_start_naming_it(
    environment, variables, message
):
    os.environ.update(variables)
    with pytest.raises(ImproperlyConfigured, match=re.escape(message)):
        importlib.reload(config.settings)


def test_the_decoder_settings_and_their_defaults(environment):
    for name in ("VAE_DECODER", "VAE_DECODER_REPO", "MODEL_ID", "MODEL_ADAPTERS"):
        os.environ.pop(name, None)
    shipped = importlib.reload(config.settings).VAE_DECODER  # the default model and its LoRA
    assert (shipped.kind, shipped.repo) == ("tiny", None)  # the repo follows the pipeline
    os.environ["MODEL_ADAPTERS"] = (
        ""  # any other choice (tests/imagegen/model/test_default_model.py)
    )
    default = importlib.reload(config.settings).VAE_DECODER
    assert (default.kind, default.repo) == ("full", None)
    os.environ.update({"VAE_DECODER": "tiny", "VAE_DECODER_REPO": "org/taesd-x"})
    tiny = importlib.reload(config.settings).VAE_DECODER
    assert (tiny.kind, tiny.repo) == ("tiny", "org/taesd-x")


def test_adapter_files_may_lie_in_a_folder_of_their_repo(environment):
    os.environ["MODEL_ADAPTERS"] = "ByteDance/Hyper-SD:loras/Hyper-SD15-8steps-lora.safetensors:0.9"
    (adapter,) = importlib.reload(config.settings).MODEL_ADAPTERS
    assert (
        adapter.share_path
        == "adapters/ByteDance--Hyper-SD/loras/Hyper-SD15-8steps-lora.safetensors"
    )
