"""The schedulers a generation may ask for by name, and AUTOMATIC1111's names for them.

Why it exists: few-step models (LCM, Hyper-SD, SDXL-Lightning, SDXL-Turbo) need a scheduler
their base model does not ship with, often with "trailing" timestep spacing (the schedule
starts at the last training timestep, as they were distilled). The native API names a
scheduler with one short id (`euler_trailing`); the A1111 adapter receives a sampler and a
schedule type ("DPM++ 2M" + "Karras") and maps them here, so both speak of the same table.

What a client reads back is always A1111's name (`a1111_name`: "Euler a", "DPM++ 2M Karras",
"Euler SGM Uniform"), for a scheduler of the table and for a model's own one (`sampler_of`:
Stable Diffusion's PNDM is A1111's "PLMS"): people know samplers by those names, and the ids
are only this service's spelling of its input.

A scheduler is built per job from the model's own config (`from_config(config, **overrides)`,
which copies it: the shipped config object is never changed), so the betas and training
timesteps stay the model's and only the sampling rule and its spacing change.
"""

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

# A1111's schedule types (1.9 and later), by the label its UI shows; "Automatic" is each
# sampler's own default, "SGM Uniform" is what diffusers calls "trailing" spacing.
A1111_SCHEDULES = ("Automatic", "Uniform", "Karras", "SGM Uniform")


@dataclass(frozen=True)
class Scheduler:
    """One named way to sample: a diffusers scheduler class and what it overrides in the
    model's config."""

    name: str
    class_name: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    # (sampler, schedule type) pairs A1111 names it by; the first is how it writes it.
    a1111: tuple[tuple[str, str], ...] = ()
    max_steps: int | None = None  # consistency schedulers pick from 50 distilled timesteps

    def build(self, config: Mapping[str, Any]) -> Any:
        import diffusers

        return getattr(diffusers, self.class_name).from_config(config, **self.overrides)

    @property
    def a1111_name(self) -> str:
        """How clients read it: "DPM++ 2M Karras" (see a1111_name())."""
        return a1111_name(*self.a1111[0])


def a1111_name(sampler: str, schedule: str) -> str:
    """One name for a sampler and its schedule type, for the places that hold one string (a
    record, a header): the sampler, then the schedule type unless it is "Automatic", as A1111
    named them before 1.9 split the two ("DPM++ 2M Karras"). Every input here reads it back
    (a1111_scheduler), so a record's name can be sent again."""
    return sampler if schedule == "Automatic" else f"{sampler} {schedule}"


def a1111_parts(name: str) -> tuple[str, str]:
    """The (sampler, schedule type) of an a1111_name: A1111 1.9 and later answer the two
    apart (the info's `sampler_name`, the infotext's "Schedule type")."""
    for schedule in _NAMED_SCHEDULES:
        if name.endswith(" " + schedule):
            return name[: -len(schedule) - 1], schedule
    return name, "Automatic"


def infotext_sampler(name: str) -> str:
    """The infotext's words for an a1111_name: "DPM++ 2M, Schedule type: Karras", which
    A1111's "PNG Info" reads back as the sampler and the schedule type."""
    sampler, schedule = a1111_parts(name)
    return sampler if schedule == "Automatic" else f"{sampler}, Schedule type: {schedule}"


_TRAILING = {"timestep_spacing": "trailing"}
_DPMPP_2M = {"algorithm_type": "dpmsolver++", "solver_order": 2, "use_karras_sigmas": False}
_AUTO, _UNIFORM, _KARRAS, _SGM = A1111_SCHEDULES
# The schedule types a name can end with, the longest first ("SGM Uniform" before "Uniform").
_NAMED_SCHEDULES = (_SGM, _KARRAS, _UNIFORM)


def _a1111(sampler: str, *schedules: str) -> tuple[tuple[str, str], ...]:
    return tuple((sampler, schedule) for schedule in schedules)


SCHEDULERS: dict[str, Scheduler] = {
    s.name: s
    for s in (
        Scheduler("euler", "EulerDiscreteScheduler", {}, _a1111("Euler", _AUTO, _UNIFORM)),
        Scheduler("euler_trailing", "EulerDiscreteScheduler", _TRAILING, _a1111("Euler", _SGM)),
        Scheduler(
            "euler_a", "EulerAncestralDiscreteScheduler", {}, _a1111("Euler a", _AUTO, _UNIFORM)
        ),
        Scheduler(
            "euler_a_trailing", "EulerAncestralDiscreteScheduler", _TRAILING,
            _a1111("Euler a", _SGM),
        ),
        Scheduler("dpmpp_2m", "DPMSolverMultistepScheduler", _DPMPP_2M,
                  _a1111("DPM++ 2M", _UNIFORM)),
        Scheduler(
            "dpmpp_2m_karras", "DPMSolverMultistepScheduler",
            _DPMPP_2M | {"use_karras_sigmas": True}, _a1111("DPM++ 2M", _KARRAS, _AUTO),
        ),
        Scheduler(
            "dpmpp_2m_trailing", "DPMSolverMultistepScheduler", _DPMPP_2M | _TRAILING,
            _a1111("DPM++ 2M", _SGM),
        ),
        Scheduler("ddim", "DDIMScheduler", {}, _a1111("DDIM", _AUTO, _UNIFORM)),
        Scheduler("ddim_trailing", "DDIMScheduler", _TRAILING, _a1111("DDIM", _SGM)),
        Scheduler("lcm", "LCMScheduler", {}, _a1111("LCM", _AUTO), max_steps=50),
        Scheduler("tcd", "TCDScheduler", {}, _a1111("TCD", _AUTO), max_steps=50),
    )
}  # fmt: skip
NAMES = tuple(SCHEDULERS)
A1111_NAMES = tuple(s.a1111_name for s in SCHEDULERS.values())


class UnknownScheduler(ValueError):
    """A name outside the table; the message lists the valid ones."""


def scheduler_named(name: str) -> Scheduler:
    try:
        return SCHEDULERS[name]
    except KeyError:
        raise UnknownScheduler(f"unknown scheduler {name!r}; valid: {', '.join(NAMES)}") from None


def scheduler_for_input(value: str) -> str:
    """The table's name for what the native `scheduler` field takes: a name of the table, or
    A1111's name for one, as records and X-Scheduler write it (any case, read as the A1111
    API reads it: a1111_scheduler), so that a record's scheduler can be sent again."""
    if value in SCHEDULERS:
        return value
    try:
        name = a1111_scheduler(value)
    except UnknownScheduler:
        name = None
    if name is None:
        raise UnknownScheduler(
            f"unknown scheduler {value!r}; valid: {', '.join(NAMES)}, or A1111's name for "
            f"one: {', '.join(A1111_NAMES)}"
        )
    return name


@contextmanager
def scheduler_applied(pipe: Any, name: str | None) -> Iterator[None]:
    """Runs the body with the named scheduler on the pipeline, then puts the model's own
    back. Jobs run one at a time on one worker thread, so swapping it on the shared pipeline
    is safe; None leaves the model's own in place."""
    if name is None:
        yield
        return
    original = pipe.scheduler
    pipe.scheduler = scheduler_named(name).build(original.config)
    try:
        yield
    finally:
        pipe.scheduler = original


# --- a model's own scheduler, by A1111's name ------------------------------------------------

# A1111's sampler for each diffusers class: the diffusers documentation's table of A1111
# equivalents, and A1111's "PLMS" for PNDM without its Runge-Kutta warm-up (skip_prk_steps,
# as Stable Diffusion ships it); DPMSolverMultistep is "DPM++ 2M" only as dpmsolver++ of
# order 2 (sampler_of).
_A1111_SAMPLER_OF_CLASS = {
    "EulerDiscreteScheduler": "Euler",
    "EulerAncestralDiscreteScheduler": "Euler a",
    "DPMSolverSinglestepScheduler": "DPM++ SDE",
    "DDIMScheduler": "DDIM",
    "LMSDiscreteScheduler": "LMS",
    "HeunDiscreteScheduler": "Heun",
    "KDPM2DiscreteScheduler": "DPM2",
    "KDPM2AncestralDiscreteScheduler": "DPM2 a",
    "UniPCMultistepScheduler": "UniPC",
    "LCMScheduler": "LCM",
    "TCDScheduler": "TCD",
}
# Samplers whose Automatic schedule type in A1111 is not the model's own spacing (Karras or
# exponential), so a model's own spacing is "Uniform" for them.
_AUTOMATIC_IS_NOT_UNIFORM = {"DPM++ 2M", "DPM++ 2M SDE", "DPM++ SDE"}
# Samplers that pick their own timesteps: no schedule type applies.
_OWN_TIMESTEPS = {"LCM", "TCD"}


def sampler_of(scheduler: Any) -> str:
    """A1111's name for a scheduler object (the model's own, when a request chose none): its
    class's sampler with the schedule type its config gives (Karras sigmas, trailing spacing
    as "SGM Uniform"). A class A1111 has no sampler for keeps diffusers' name without
    "Scheduler" ("PNDM" with its warm-up, "DEISMultistep")."""
    class_name = type(scheduler).__name__
    config = scheduler.config
    sampler = _A1111_SAMPLER_OF_CLASS.get(class_name)
    if class_name == "PNDMScheduler" and config.get("skip_prk_steps"):
        sampler = "PLMS"
    elif class_name == "DPMSolverMultistepScheduler" and config.get("solver_order") == 2:
        sampler = {"dpmsolver++": "DPM++ 2M", "sde-dpmsolver++": "DPM++ 2M SDE"}.get(
            config.get("algorithm_type")
        )
    if sampler is None:
        return class_name.removesuffix("Scheduler")
    if sampler in _OWN_TIMESTEPS:
        return sampler
    if config.get("use_karras_sigmas"):
        schedule = _KARRAS
    elif config.get("timestep_spacing") == "trailing":
        schedule = _SGM
    else:
        schedule = _UNIFORM if sampler in _AUTOMATIC_IS_NOT_UNIFORM else _AUTO
    return a1111_name(sampler, schedule)


def sampler_ran(pipe: Any, name: str | None) -> str:
    """A1111's name for the scheduler a generation runs with: the chosen one of the table,
    else the model's own (`pipe.scheduler`)."""
    return SCHEDULERS[name].a1111_name if name is not None else sampler_of(pipe.scheduler)


# --- AUTOMATIC1111's names ---------------------------------------------------------------------


def _key(text: str) -> str:
    """A1111 names compared as its API compares labels and ids: "sgm_uniform" is "SGM Uniform"."""
    return " ".join(text.replace("_", " ").split()).casefold()


# Older sampler ids A1111's API still accepts.
_SAMPLER_ALIASES = {"k euler": "euler", "k euler a": "euler a", "k dpmpp 2m": "dpm++ 2m"}
# Schedule types that A1111 1.9 split off the older combined sampler names, longest first.
_SUFFIXES = ("sgm uniform", "karras", "uniform")


def _a1111_table() -> dict[tuple[str, str], str]:
    return {
        (_key(sampler), _key(schedule)): s.name
        for s in SCHEDULERS.values()
        for sampler, schedule in s.a1111
    }


_A1111 = _a1111_table()
A1111_SAMPLERS = tuple(dict.fromkeys(s.a1111[0][0] for s in SCHEDULERS.values()))


def a1111_scheduler(sampler: str | None, schedule: str | None = None) -> str | None:
    """The table's name for an A1111 sampler and schedule type, by A1111 1.9's rules: "DPM++
    2M" with "Automatic" is Karras, and an older combined name ("DPM++ 2M Karras") is the
    sampler plus that schedule type. None when no sampler is given (the service's default
    applies). An unknown pair raises UnknownScheduler listing what is accepted."""
    if not sampler or not sampler.strip():
        return None
    sampler_key = _SAMPLER_ALIASES.get(_key(sampler), _key(sampler))
    schedule_key = _key(schedule or "") or "automatic"
    if schedule_key == "automatic":
        for suffix in _SUFFIXES:
            if sampler_key.endswith(" " + suffix):
                sampler_key, schedule_key = sampler_key[: -len(suffix) - 1], suffix
                break
    name = _A1111.get((sampler_key, schedule_key))
    if name is None:
        raise UnknownScheduler(
            f"unknown sampler {sampler!r} with schedule type {schedule or 'Automatic'!r}; "
            f"samplers: {', '.join(A1111_SAMPLERS)}; schedule types: "
            f"{', '.join(A1111_SCHEDULES)} (Karras and SGM Uniform not with every sampler)"
        )
    return name
