"""The scheduler table, in-process: each name builds its class with its spacing from the
model's own config (which stays untouched), A1111's sampler names map onto it, every scheduler
(the model's own included) is named back by A1111's name, and each one runs a real generation
on the tiny pipelines with the model's own scheduler put back after."""

import copy

import diffusers
import pytest

from imagegen.generation.images import GenerationParameters
from imagegen.generation.render import Cancelled, render
from imagegen.generation.schedulers import (
    A1111_NAMES,
    NAMES,
    SCHEDULERS,
    UnknownScheduler,
    a1111_parts,
    a1111_scheduler,
    infotext_sampler,
    sampler_of,
    scheduler_applied,
    scheduler_for_input,
    scheduler_named,
)
from imagegen.model.pipeline import load_pipeline
from tests.support.model_service import SD_REPO, SDXL_REPO

# name -> (class, timestep_spacing, karras sigmas) it must build from SDXL's shipped config
# (Euler, "leading"); the consistency schedulers keep the config's spacing but ignore it.
EXPECTED = {
    "euler": ("EulerDiscreteScheduler", "leading", False),
    "euler_trailing": ("EulerDiscreteScheduler", "trailing", False),
    "euler_a": ("EulerAncestralDiscreteScheduler", "leading", None),
    "euler_a_trailing": ("EulerAncestralDiscreteScheduler", "trailing", None),
    "dpmpp_2m": ("DPMSolverMultistepScheduler", "leading", False),
    "dpmpp_2m_karras": ("DPMSolverMultistepScheduler", "leading", True),
    "dpmpp_2m_trailing": ("DPMSolverMultistepScheduler", "trailing", False),
    "ddim": ("DDIMScheduler", "leading", None),
    "ddim_trailing": ("DDIMScheduler", "trailing", None),
    "lcm": ("LCMScheduler", "leading", None),
    "tcd": ("TCDScheduler", "leading", None),
}


@pytest.fixture(scope="module")
def sd(hub_root):
    return load_pipeline(hub_root / SD_REPO, variant="fp16", device="cpu")


@pytest.fixture(scope="module")
def sdxl(hub_root):
    return load_pipeline(hub_root / SDXL_REPO, variant="fp16", device="cpu")


def test_the_table_is_the_issue_set_and_nothing_unexpected():
    assert set(NAMES) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_name_builds_its_class_and_spacing_from_the_model_config(sdxl, name):
    config = sdxl.scheduler.config
    before = copy.deepcopy(dict(config))
    built = scheduler_named(name).build(config)
    class_name, spacing, karras = EXPECTED[name]
    assert type(built).__name__ == class_name
    assert built.config.timestep_spacing == spacing
    if karras is not None:
        assert built.config.use_karras_sigmas is karras
    if class_name == "DPMSolverMultistepScheduler":
        assert (built.config.algorithm_type, built.config.solver_order) == ("dpmsolver++", 2)
    # The model's betas and training schedule are kept ...
    assert built.config.beta_schedule == config.beta_schedule == "scaled_linear"
    assert built.config.num_train_timesteps == config.num_train_timesteps
    # ... and its config object is not changed.
    assert dict(config) == before and sdxl.scheduler.config is config


def test_trailing_spacing_starts_at_the_last_training_timestep(sdxl):
    """What few-step models need: leading spacing never reaches t=999 in 4 steps."""
    timesteps = {}
    for name in ("euler", "euler_trailing", "ddim_trailing", "lcm", "tcd"):
        scheduler = scheduler_named(name).build(sdxl.scheduler.config)
        scheduler.set_timesteps(4)
        timesteps[name] = [int(t) for t in scheduler.timesteps]
    assert timesteps["euler"] == [751, 501, 251, 1]  # leading, steps_offset 1
    assert timesteps["euler_trailing"] == [999, 749, 499, 249]
    assert timesteps["ddim_trailing"] == [999, 749, 499, 249]
    assert timesteps["lcm"][0] == 999 and timesteps["tcd"][0] == 999


def test_an_unknown_name_lists_the_valid_ones():
    with pytest.raises(UnknownScheduler) as refused:
        scheduler_named("euler_ancestral")
    assert str(refused.value) == f"unknown scheduler 'euler_ancestral'; valid: {', '.join(NAMES)}"


@pytest.mark.parametrize(
    ("sampler", "schedule", "name"),
    [
        ("Euler a", None, "euler_a"),
        ("Euler a", "Automatic", "euler_a"),
        ("Euler a", "SGM Uniform", "euler_a_trailing"),
        ("Euler", "sgm_uniform", "euler_trailing"),  # the API's schedule id
        ("Euler", "Uniform", "euler"),
        ("DPM++ 2M Karras", None, "dpmpp_2m_karras"),  # the pre-1.9 combined name
        ("DPM++ 2M", "Karras", "dpmpp_2m_karras"),
        ("DPM++ 2M", "automatic", "dpmpp_2m_karras"),  # A1111 1.9: Automatic is Karras here
        ("DPM++ 2M", "Uniform", "dpmpp_2m"),
        ("DPM++ 2M", "SGM Uniform", "dpmpp_2m_trailing"),
        ("dpm++ 2m karras", "", "dpmpp_2m_karras"),
        ("DDIM", None, "ddim"),
        ("DDIM", "SGM Uniform", "ddim_trailing"),
        ("LCM", "Automatic", "lcm"),
        ("TCD", None, "tcd"),
        ("k_euler_a", None, "euler_a"),
        (None, None, None),  # no sampler: the service's default
        ("  ", "Karras", None),
    ],
)
def test_a1111_sampler_names_map_onto_the_table(sampler, schedule, name):
    assert a1111_scheduler(sampler, schedule) == name


@pytest.mark.parametrize(
    ("sampler", "schedule"), [("DPM++ SDE", "Karras"), ("LCM", "Karras"), ("Euler", "Exponential")]
)
def test_an_unknown_a1111_pair_is_refused_listing_what_is_accepted(sampler, schedule):
    with pytest.raises(UnknownScheduler) as refused:
        a1111_scheduler(sampler, schedule)
    message = str(refused.value)
    assert message.startswith(f"unknown sampler {sampler!r} with schedule type {schedule!r}")
    assert "samplers: Euler, Euler a, DPM++ 2M, DDIM, LCM, TCD" in message
    assert "schedule types: Automatic, Uniform, Karras, SGM Uniform" in message


def test_every_a1111_label_maps_back_to_its_name():
    for name, scheduler in SCHEDULERS.items():
        for sampler, schedule in scheduler.a1111:
            assert a1111_scheduler(sampler, schedule) == name


# name -> A1111's name for it: what records, X-Scheduler and the page say of it.
A1111_NAMED = {
    "euler": "Euler",
    "euler_trailing": "Euler SGM Uniform",
    "euler_a": "Euler a",
    "euler_a_trailing": "Euler a SGM Uniform",
    "dpmpp_2m": "DPM++ 2M Uniform",
    "dpmpp_2m_karras": "DPM++ 2M Karras",
    "dpmpp_2m_trailing": "DPM++ 2M SGM Uniform",
    "ddim": "DDIM",
    "ddim_trailing": "DDIM SGM Uniform",
    "lcm": "LCM",
    "tcd": "TCD",
}


def test_each_scheduler_has_an_a1111_name_every_input_reads_back():
    assert {name: SCHEDULERS[name].a1111_name for name in NAMES} == A1111_NAMED
    assert tuple(A1111_NAMED[name] for name in NAMES) == A1111_NAMES
    for name, a1111 in A1111_NAMED.items():
        assert a1111_parts(a1111) == SCHEDULERS[name].a1111[0]  # info's sampler, schedule type
        assert a1111_scheduler(a1111) == name  # the A1111 API's sampler_name
        assert scheduler_for_input(a1111) == scheduler_for_input(a1111.upper()) == name
        assert scheduler_for_input(name) == name  # the ids as before
    assert infotext_sampler("DPM++ 2M Karras") == "DPM++ 2M, Schedule type: Karras"
    assert infotext_sampler("Euler a") == "Euler a"


def test_an_unknown_scheduler_input_lists_the_ids_and_the_a1111_names():
    with pytest.raises(UnknownScheduler) as refused:
        scheduler_for_input("Restart")
    assert str(refused.value) == (
        f"unknown scheduler 'Restart'; valid: {', '.join(NAMES)}, or A1111's name for one: "
        f"{', '.join(A1111_NAMED.values())}"
    )


def test_the_model_own_scheduler_is_named_as_a1111_names_it(sd, sdxl):
    assert type(sd.scheduler).__name__ == "PNDMScheduler" and sd.scheduler.config.skip_prk_steps
    assert sampler_of(sd.scheduler) == "PLMS"  # PNDM without its Runge-Kutta warm-up
    assert sampler_of(sdxl.scheduler) == "Euler"
    # A scheduler of the table built from the model's config is named as the table names it.
    for name in NAMES:
        for pipe in (sd, sdxl):
            assert (
                sampler_of(scheduler_named(name).build(pipe.scheduler.config))
                == (A1111_NAMED[name])
            )
    # Classes outside the table: A1111's sampler and the config's schedule type, else
    # diffusers' own name.
    others = [
        (diffusers.PNDMScheduler(skip_prk_steps=False), "PNDM"),
        (diffusers.KDPM2DiscreteScheduler(use_karras_sigmas=True), "DPM2 Karras"),
        (diffusers.HeunDiscreteScheduler(), "Heun"),
        (diffusers.KDPM2AncestralDiscreteScheduler(), "DPM2 a"),
        (diffusers.UniPCMultistepScheduler(), "UniPC"),
        (
            diffusers.DPMSolverMultistepScheduler(algorithm_type="sde-dpmsolver++"),
            "DPM++ 2M SDE Uniform",
        ),
        (diffusers.DPMSolverSinglestepScheduler(), "DPM++ SDE Uniform"),
        (diffusers.DPMSolverMultistepScheduler(solver_order=3), "DPMSolverMultistep"),
        (diffusers.DEISMultistepScheduler(), "DEISMultistep"),
    ]
    assert [sampler_of(scheduler) for scheduler, _ in others] == [name for _, name in others]


def test_a_swapped_scheduler_is_put_back_even_when_the_body_fails(sd):
    original = sd.scheduler
    with pytest.raises(RuntimeError), scheduler_applied(sd, "lcm"):
        assert type(sd.scheduler).__name__ == "LCMScheduler"
        raise RuntimeError("a failed generation")
    assert sd.scheduler is original
    with scheduler_applied(sd, None):
        assert sd.scheduler is original


def parameters(scheduler: str, steps: int = 2) -> GenerationParameters:
    return GenerationParameters(
        prompt="a fox", negative_prompt="blur", steps=steps, guidance=5.0, width=64, height=64,
        seed=3, scheduler=scheduler, model_id=SD_REPO, revision=None,
    )  # fmt: skip


@pytest.mark.parametrize("name", sorted(EXPECTED))
@pytest.mark.parametrize("layout", ["sd", "sdxl"])
def test_each_scheduler_renders_on_the_tiny_pipelines_and_the_model_own_comes_back(
    request, layout, name
):
    pipe = request.getfixturevalue(layout)
    original, config = pipe.scheduler, copy.deepcopy(dict(pipe.scheduler.config))
    seen = []

    def on_step(done: int, total: int) -> None:
        seen.append((type(pipe.scheduler).__name__, done, total))

    for steps in (1, 3):
        seen.clear()
        rendered = render(
            pipe, parameters(name, steps), scheduler=name, device="cpu", home="cpu",
            on_step=on_step,
            stop_requested=lambda: False,
        )  # fmt: skip
        assert rendered.image.size == (64, 64)
        assert seen == [(EXPECTED[name][0], i, steps) for i in range(1, steps + 1)]
    assert pipe.scheduler is original and dict(pipe.scheduler.config) == config


def test_a_cancelled_generation_puts_the_model_scheduler_back(sd):
    original = sd.scheduler

    def cancel(done: int, total: int) -> None:
        raise Cancelled()

    with pytest.raises(Cancelled):
        render(
            sd, parameters("dpmpp_2m_karras"), scheduler="dpmpp_2m_karras", device="cpu",
            home="cpu", on_step=cancel, stop_requested=lambda: False,
        )  # fmt: skip
    assert sd.scheduler is original


def test_the_model_own_scheduler_runs_when_none_is_named(sd):
    """None chosen: the model's own runs, whatever name its record gives it."""
    names = []
    render(
        sd, parameters("PLMS"), scheduler=None, device="cpu", home="cpu",
        on_step=lambda done, total: names.append(type(sd.scheduler).__name__),
        stop_requested=lambda: False,
    )  # fmt: skip
    assert set(names) == {"PNDMScheduler"}
