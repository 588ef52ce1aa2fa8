"""bench/time_to_image_bench.py's shipped configuration, (d): the service as it ships. Its
full run takes a quarter of an hour on full-size SDXL; what decides whether it measures the
shipped default is checked here in a second: nothing that picks the defaults reaches its app
(whatever the shell sets), only a prompt is sent, what it expects the service to report is
what the default model's preset runs with its decoder, and plain diffusers never fuses two
LoRAs in one child."""

import mmap
import os
import time

import pytest

from bench.time_to_image_bench import (
    CONFIGS,
    FAST,
    HYPER1,
    PROMPT,
    SAMPLED,
    SHIPPED,
    SHIPPED_UNSET,
    TURBO,
    Run,
    counted_since,
    medians,
    neighbour,
    parse_args,
    plain_groups,
    print_run,
    process_counters,
    service_app,
    side_of,
)
from imagegen.generation.presets import preset_for
from imagegen.generation.schedulers import SCHEDULERS
from imagegen.model.adapters import DEFAULT_MODEL_ADAPTERS, DEFAULT_MODEL_ID, parse_adapters
from imagegen.model.decoder import TINY, default_decoder


def test_the_shipped_app_gets_none_of_the_settings_that_pick_the_defaults(monkeypatch, tmp_path):
    for key in ("MODEL_ID", "MODEL_ADAPTERS", "VAE_DECODER", "GEN_DEFAULT_STEPS"):
        monkeypatch.setenv(key, "set-in-this-shell")
    env = {"MODEL_DIR": str(tmp_path)}
    shipped = service_app(SHIPPED, "sdxl", env, tmp_path / "log").env
    assert not set(SHIPPED_UNSET) & set(shipped), sorted(set(SHIPPED_UNSET) & set(shipped))
    assert shipped["MODEL_DIR"] == str(tmp_path)  # the bench's own settings stay
    fast = service_app(FAST, "sdxl", env, tmp_path / "log").env
    assert (
        fast["MODEL_ADAPTERS"]
        == "latent-consistency/lcm-lora-sdxl:pytorch_lora_weights.safetensors"
    )


def test_the_shipped_request_is_a_prompt_and_expects_the_default_preset():
    assert SHIPPED.form(1024) == {"prompt": PROMPT}
    adapters = SHIPPED.adapters("sdxl")
    assert adapters == parse_adapters(DEFAULT_MODEL_ADAPTERS)
    preset = preset_for(model_id=DEFAULT_MODEL_ID, adapters=adapters)
    assert preset is not None
    assert (SHIPPED.steps, SHIPPED.guidance, SHIPPED.scheduler) == (
        preset.steps, preset.guidance, preset.scheduler,
    )  # fmt: skip
    # The tiny decoder on the share and in plain diffusers, as the shipped default decodes;
    # the service itself is told no VAE_DECODER (SHIPPED_UNSET).
    assert SHIPPED.tiny == (default_decoder(DEFAULT_MODEL_ID, adapters) == TINY) is True
    assert SHIPPED.service_env("sdxl") == {}
    assert SHIPPED.expected_headers() == {
        "X-Steps": str(preset.steps),
        "X-Guidance": f"{preset.guidance:g}",
        "X-Scheduler": SCHEDULERS[preset.scheduler].a1111_name,
    }


def test_plain_diffusers_fuses_one_lora_per_child():
    assert plain_groups(["defaults", "fast", "fast_tiny", "shipped"]) == [
        ["defaults", "fast", "fast_tiny"], ["shipped"]
    ]  # fmt: skip
    assert plain_groups(["shipped"]) == [["shipped"]]
    assert plain_groups(["fast"]) == [["fast"]]
    # The recipes: SDXL-Turbo fuses nothing (it runs before the first LoRA), Hyper-SD its own.
    assert plain_groups(["hyper1", "turbo"]) == [["turbo", "hyper1"]]
    assert plain_groups(list(CONFIGS)) == [
        ["defaults", "turbo", "fast", "fast_tiny"], ["shipped"], ["hyper1"]
    ]  # fmt: skip
    assert plain_groups(["turbo"]) == [["turbo"]]


@pytest.mark.parametrize("config", [HYPER1, TURBO], ids=["hyper1", "turbo"])
def test_each_one_step_recipe_is_what_its_preset_runs(config):
    """The service is told only the recipe's setting (the Hyper-SD LoRA, or SDXL-Turbo as
    MODEL_ID) and sent a prompt: the preset decides, and the bench expects, 1 step at
    guidance 0 with the model card's scheduler, which plain diffusers is given too."""
    adapters = config.adapters("sdxl")
    preset = preset_for(model_id=config.repo_id or "bench/sdxl-random", adapters=adapters)
    assert preset is not None
    assert (config.steps, config.guidance, config.scheduler) == (
        preset.steps, preset.guidance, preset.scheduler,
    )  # fmt: skip
    assert config.expected_headers() == {
        "X-Steps": "1", "X-Guidance": "0",
        "X-Scheduler": SCHEDULERS[preset.scheduler].a1111_name,
    }  # fmt: skip
    assert config.service_env("sdxl")["VAE_DECODER"] == "tiny"
    assert "steps" not in config.form(1024)


def test_the_recipes_run_at_their_own_size_and_only_when_asked_for():
    args = parse_args(["--model", "sdxl", "--configs", "hyper1,turbo"])
    assert args.configs_for == {"sdxl": ["hyper1", "turbo"]}
    assert side_of(TURBO, "sdxl", args) == 512 and side_of(HYPER1, "sdxl", args) == 1024
    assert HYPER1.service_env("sdxl")["MODEL_ADAPTERS"] == (
        "ByteDance/Hyper-SD:Hyper-SDXL-1step-lora.safetensors"
    )
    assert parse_args(["--model", "sdxl"]).configs_for == {
        "sdxl": ["defaults", "fast", "fast_tiny", "shipped"]
    }


def test_steps_asked_for_reach_the_service_and_what_it_must_report():
    """--steps shortens a run (a UNet call costs what it costs at any count): the service is
    sent them, for the shipped prompt-only request too, and must report having run them."""
    assert FAST.form(1024, steps=1)["steps"] == "1"
    assert SHIPPED.form(1024, steps=1) == {"prompt": PROMPT, "steps": "1"}
    assert FAST.expected_headers(1)["X-Steps"] == "1"
    assert CONFIGS["defaults"].form(1024)["steps"] == "2"


def test_the_shipped_configuration_is_sdxl_only(capsys):
    assert parse_args(["--model", "both"]).configs_for == {
        "sd15": ["defaults", "fast", "fast_tiny"],
        "sdxl": ["defaults", "fast", "fast_tiny", "shipped"],
    }
    assert parse_args(["--model", "sdxl", "--configs", "shipped"]).configs_for == {
        "sdxl": ["shipped"]
    }
    with pytest.raises(SystemExit):
        parse_args(["--model", "sd15", "--configs", "shipped"])
    with pytest.raises(SystemExit):
        parse_args(["--model", "sd15", "--configs", "turbo"])
    assert "SDXL only" in capsys.readouterr().err


def test_repeated_requests_report_each_figures_median_and_the_kernels_share(capsys):
    samples = [
        {"encode": 1.5, "denoise": 10.0, "decode": 1.0, "png_store": 0.1, "total": 12.6,
         "cpu": 25.0, "kernel_cpu": 2.0, "minor_faults": 900_000},
        {"encode": 0.9, "denoise": 12.0, "decode": 1.2, "png_store": 0.2, "total": 14.3,
         "cpu": 28.0, "kernel_cpu": 1.0, "minor_faults": 700_000},
        {"encode": 1.1, "denoise": 11.0, "decode": 0.8, "png_store": 0.3, "total": 13.2,
         "cpu": 26.0, "kernel_cpu": 3.0, "minor_faults": 800_000},
    ]  # fmt: skip
    figures = medians(samples)
    assert figures == {"encode": 1.1, "denoise": 11.0, "decode": 1.0, "png_store": 0.2,
                       "total": 13.2, "cpu": 26.0, "kernel_cpu": 2.0,
                       "minor_faults": 800_000}  # fmt: skip
    run = Run(model="sdxl", config="turbo", variant="service", threads=2, calls=1, batch=1,
              peak_rss_bytes=2**30, **figures)  # fmt: skip
    print_run(run, fp32=2**30)
    assert "(CPU 26 s, kernel 2.0 s, 0.80 M page faults)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        parse_args(["--repeat", "0"])


def test_an_even_number_of_requests_gives_whole_page_faults():
    samples = [dict.fromkeys(SAMPLED, 1.0) | {"minor_faults": n} for n in (3, 4)]
    assert medians(samples)["minor_faults"] == 4 and isinstance(
        medians(samples)["minor_faults"], int
    )


def test_a_requests_counters_are_its_process_cpu_and_page_faults():
    before = process_counters("self")
    # Fresh pages, zero-filled by the kernel on first touch: a mapping of its own, as a
    # bytearray may take pages malloc kept from an earlier test of this process.
    touched = mmap.mmap(-1, 64 * 2**20)
    for offset in range(0, len(touched), 4096):
        touched[offset] = 1
    touched.close()
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:  # CPU time of its own
        pass
    spent = counted_since("self", before)
    assert spent["minor_faults"] >= 64 * 2**20 // 4096 * 0.9
    # The kernel's share may be all of it (the page faults), equal but for float rounding.
    assert 0.3 <= spent["cpu"] < 5 and 0 <= spent["kernel_cpu"] <= spent["cpu"] + 1e-9


def test_the_neighbour_is_a_busy_loop_of_its_own_session_while_the_requests_run():
    with neighbour(False) as none:
        assert none is None
    with neighbour(True) as loop:
        assert loop is not None and loop.poll() is None
        assert os.getsid(loop.pid) == loop.pid  # another program's session, not the bench's
        before = process_counters(loop.pid)["cpu"]
        time.sleep(1.0)
        assert process_counters(loop.pid)["cpu"] - before > 0.05  # busy (the machine is shared)
    assert loop.poll() is not None
    assert parse_args(["--quick", "--neighbour"]).neighbour
    assert not parse_args(["--quick"]).neighbour
