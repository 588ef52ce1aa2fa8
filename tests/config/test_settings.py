"""Settings that cannot work stop the service at start, naming the variable and the rule
(config/settings.py is executed again here with the bad environment, then judged by the
imagegen app's own checks, as its start does)."""

import importlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest
from django.core.exceptions import ImproperlyConfigured

import config.settings
from imagegen.checks import refuse_bad_settings
from tests.support.processes import ROOT


@pytest.fixture
def environment() -> Iterator[dict[str, str]]:
    """Variables the test sets for one execution of config/settings.py; afterwards the
    environment and the module are as they were."""
    saved = dict(os.environ)
    changes: dict[str, str] = {}
    yield changes
    os.environ.clear()
    os.environ.update(saved)
    importlib.reload(config.settings)


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"DEVICE": "gpu"}, "DEVICE must be auto, cpu or cuda, got 'gpu'"),
        ({"PREVIEW": "full"}, "PREVIEW must be approx, tiny or off"),
        ({"PREVIEW": "tiny", "VAE_DECODER": "full"}, "PREVIEW=tiny needs VAE_DECODER=tiny"),
        ({"PREVIEW_EVERY": "0"}, "PREVIEW_EVERY"),
        ({"PREVIEW_SECONDS": "-1"}, "PREVIEW_SECONDS"),
        ({"TORCH_THREADS": "0"}, "TORCH_THREADS must be auto or at least 1, got '0'"),
        ({"VAE_TILE_SIZE": "100"}, "VAE_TILE_SIZE must be auto, 0 or a multiple of 8 of at"),
        ({"VAE_TILE_SIZE": "big"}, "VAE_TILE_SIZE must be auto, 0 or a multiple of 8 of at"),
        ({"GEN_QUEUE_MAX": "-1"}, "GEN_QUEUE_MAX must be at least 0, got -1"),
        ({"KEY_DEFAULT_MAX_QUEUED": "0"}, "KEY_DEFAULT_MAX_QUEUED must be at least 1, got 0"),
        ({"KEY_DEFAULT_PER_MINUTE": "x"}, "KEY_DEFAULT_PER_MINUTE must be an integer, got 'x'"),
        ({"GEN_QUEUE_MAX": "many"}, "GEN_QUEUE_MAX must be an integer, got 'many'"),
        ({"GEN_SYNC_TIMEOUT": "0"}, "GEN_SYNC_TIMEOUT must be at least 1, got 0"),
        ({"GEN_SYNC_REFUSE_FACTOR": "-1"}, "GEN_SYNC_REFUSE_FACTOR must be at least 0, got -1"),
        ({"GEN_MAX_STEPS": "1000"}, "GEN_MAX_STEPS must be at most 500, got 1000"),
        ({"GEN_NICE": "20"}, "GEN_NICE must be at most 19, got 20"),
        ({"GEN_NICE": "-5"}, "GEN_NICE must be at least 0, got -5"),
        ({"LOG_FORMAT": "xml"}, "LOG_FORMAT must be text or json, got 'xml'"),
        ({"WORKER_METRICS_PORT": "70000"}, "WORKER_METRICS_PORT must be at most 65535"),
        ({"GEN_LOAD_TIMEOUT": "0"}, "GEN_LOAD_TIMEOUT must be at least 0.001, got 0"),
        ({"GEN_MAX_GUIDANCE": "nan"}, "GEN_MAX_GUIDANCE must be a finite number"),
        ({"GEN_MAX_GUIDANCE": "lots"}, "GEN_MAX_GUIDANCE must be a number, got 'lots'"),
        (
            {"GEN_DEFAULT_STEPS": "30", "GEN_MAX_STEPS": "20"},
            "GEN_DEFAULT_STEPS must be between 1 and GEN_MAX_STEPS",
        ),
        ({"GEN_DEFAULT_GUIDANCE": "31"}, "GEN_DEFAULT_GUIDANCE must be between 0 and"),
        ({"GEN_MIN_SIDE": "60"}, "GEN_MIN_SIDE and GEN_MAX_SIDE: multiples of 8"),
        ({"GEN_MIN_SIDE": "512", "GEN_MAX_SIDE": "256"}, "GEN_MIN_SIDE and GEN_MAX_SIDE"),
        ({"ATTENTION_SLICING": "sometimes"}, "ATTENTION_SLICING must be a boolean"),
        ({"MODEL_ADAPTERS": "lcm-lora"}, "MODEL_ADAPTERS: 'lcm-lora' is not repo:file[:scale]"),
        ({"MODEL_ADAPTERS": "org/lora:w.bin"}, "must name a .safetensors file"),
        ({"MODEL_ADAPTERS": "org/lora:w.safetensors:big"}, "scale in 'org/lora:w.safetensors:big'"),
        ({"GUNICORN_THREADS": "1"}, "the worker runs 1 thread (gunicorn's --threads, or"),
        (
            {"GUNICORN_THREADS": "8", "EVENT_STREAMS_MAX": "8"},
            "EVENT_STREAMS_MAX must be below GUNICORN_THREADS (8), got 8",
        ),
        ({"EVENT_STREAM_SECONDS": "0"}, "EVENT_STREAM_SECONDS must be at least 0.1, got 0"),
        (
            {"GUNICORN_THREADS": "8", "SYNC_WAITERS_MAX": "8"},
            "SYNC_WAITERS_MAX must be below GUNICORN_THREADS (8), got 8",
        ),
        ({"KEY_QUEUE_SHARE": "101"}, "KEY_QUEUE_SHARE is a percentage, 1 to 100, got 101"),
        ({"KEY_QUEUE_SHARE": "0"}, "KEY_QUEUE_SHARE must be at least 1, got 0"),
        ({"KEY_STREAMS_MAX": "0"}, "KEY_STREAMS_MAX must be at least 1, got 0"),
        ({"DEBUG": "0", "SECRET_KEY": ""}, "SECRET_KEY must be set when DEBUG is off"),
        (
            {"JOB_BROKER_URL": "amqp://guest@rabbit//"},
            "JOB_BROKER_URL must be a redis://, rediss:// or unix:// URL, got 'amqp://guest@rabbit//'",
        ),
        ({"JOB_HEARTBEAT_TTL": "2"}, "JOB_HEARTBEAT_TTL must be at least 3, got 2"),
        ({"JOB_STORE_TIMEOUT_MS": "50"}, "JOB_STORE_TIMEOUT_MS must be at least 100, got 50"),
        (
            {"GUNICORN_THREADS": "8", "JOB_STORE_MAX_CONCURRENT": "8"},
            "JOB_STORE_MAX_CONCURRENT must be below GUNICORN_THREADS (8), got 8",
        ),
        (
            {"MODEL_DIR": "/srv/share", "DOWNLOAD_CACHE_DIR": "/srv/share/cache"},
            "DOWNLOAD_CACHE_DIR must be outside MODEL_DIR",
        ),
    ],
)
def test_a_bad_setting_refuses_to_start_naming_it(environment, variables, message):
    os.environ.update(variables)
    with pytest.raises(ImproperlyConfigured, match=re.escape(message)):
        refuse_bad_settings(importlib.reload(config.settings))


def test_a_setting_the_imagegen_app_judges_stops_the_start():
    """The imagegen app checks its own settings when it is ready: a process that starts
    Django (gunicorn's worker, a management command) stops there, naming the variable."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "SECRET_KEY": "x",
           "PREVIEW": "full", "DEVICE": "cpu"}  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode != 0
    assert "ImproperlyConfigured: PREVIEW must be approx, tiny or off, got 'full'" in run.stderr


def test_the_defaults_start(environment):
    for name in ("DEVICE", "TORCH_THREADS", "GEN_QUEUE_MAX", "GEN_LOAD_TIMEOUT"):
        os.environ.pop(name, None)
    settings = importlib.reload(config.settings)
    assert (settings.DEVICE, settings.GEN_QUEUE_MAX, settings.GEN_LOAD_TIMEOUT) == ("auto", 8, 300)


def test_event_streams_are_bounded_well_below_the_threads_by_default(environment):
    for name in ("GUNICORN_THREADS", "EVENT_STREAMS_MAX", "EVENT_STREAM_SECONDS"):
        os.environ.pop(name, None)
    settings = importlib.reload(config.settings)
    assert (settings.EVENT_STREAMS_MAX, settings.EVENT_STREAM_SECONDS) == (4, 220)
    os.environ["GUNICORN_THREADS"] = "32"
    assert importlib.reload(config.settings).EVENT_STREAMS_MAX == 8


def test_sync_waiters_and_key_shares_have_their_defaults(environment):
    for name in ("GUNICORN_THREADS", "EVENT_STREAMS_MAX", "SYNC_WAITERS_MAX", "KEY_QUEUE_SHARE",
                 "KEY_STREAMS_MAX"):  # fmt: skip
        os.environ.pop(name, None)
    settings = importlib.reload(config.settings)
    assert (settings.SYNC_WAITERS_MAX, settings.KEY_QUEUE_SHARE, settings.KEY_STREAMS_MAX) == (
        10,
        50,
        2,
    )
    os.environ["GUNICORN_THREADS"] = "4"  # EVENT_STREAMS_MAX 1: 4 - 1 - 2
    assert importlib.reload(config.settings).SYNC_WAITERS_MAX == 1


def test_the_job_stores_calls_are_bounded_below_the_threads_by_default(environment):
    for name in ("GUNICORN_THREADS", "JOB_STORE_MAX_CONCURRENT", "JOB_STORE_TIMEOUT_MS"):
        os.environ.pop(name, None)
    settings = importlib.reload(config.settings)
    assert (settings.JOB_STORE_MAX_CONCURRENT, settings.JOB_STORE_TIMEOUT_MS) == (12, 5000)
    os.environ["GUNICORN_THREADS"] = "2"
    assert importlib.reload(config.settings).JOB_STORE_MAX_CONCURRENT == 1


def test_adapters_are_parsed_with_their_scales(environment):
    os.environ["MODEL_ADAPTERS"] = "org/lcm:lcm.safetensors, org/hyper:h.safetensors:0.125"
    adapters = importlib.reload(config.settings).MODEL_ADAPTERS
    assert [(a.repo, a.file, a.scale) for a in adapters] == [
        ("org/lcm", "lcm.safetensors", 1.0),
        ("org/hyper", "h.safetensors", 0.125),
    ]
