"""The schedulers a generation may ask for by name, and A1111's names for them.

Few-step models (LCM, SDXL-Turbo) need a scheduler their base model lacks. Both the native API
and the A1111 adapter name them from this one table. Clients read A1111's names, which people
know."""

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

# A1111's schedule types (1.9 and later) by UI label. "Automatic" is each sampler's default; "SGM
# Uniform" is diffusers' "trailing".
A1111_SCHEDULES = ("Automatic", "Uniform", "Karras", "SGM Uniform")


@dataclass(frozen=True)
class Scheduler:
    """One named way to sample: a diffusers class and its config overrides."""

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
        """How clients read it: "DPM++ 2M Karras"."""
        return a1111_name(*self.a1111[0])


def a1111_name(sampler: str, schedule: str) -> str:
    """One string for a record or header, A1111's pre-1.9 form: "DPM++ 2M Karras".

    Every input reads it back, so a record's name can be resent."""
    return sampler if schedule == "Automatic" else f"{sampler} {schedule}"


def a1111_parts(name: str) -> tuple[str, str]:
    """A1111 1.9 and later answer sampler and schedule type apart."""
    for schedule in _NAMED_SCHEDULES:
        if name.endswith(" " + schedule):
            return name[: -len(schedule) - 1], schedule
    return name, "Automatic"


def infotext_sampler(name: str) -> str:
    """A1111's "PNG Info" reads "DPM++ 2M, Schedule type: Karras" back as two fields."""
    sampler, schedule = a1111_parts(name)
    return sampler if schedule == "Automatic" else f"{sampler}, Schedule type: {schedule}"


_TRAILING = {"timestep_spacing": "trailing"}
_DPMPP_2M = {"algorithm_type": "dpmsolver++", "solver_order": 2, "use_karras_sigmas": False}
_AUTO, _UNIFORM, _KARRAS, _SGM = A1111_SCHEDULES
# Longest first: "SGM Uniform" before "Uniform".
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
    """The message lists the valid names."""


def scheduler_named(name: str) -> Scheduler:
    try:
        return SCHEDULERS[name]
    except KeyError:
        raise UnknownScheduler(f"unknown scheduler {name!r}; valid: {', '.join(NAMES)}") from None


def scheduler_for_input(value: str) -> str:
    """The table's name for the native `scheduler` field.

    It takes a table name or an A1111 name in any case, so a record's scheduler can be resent."""
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
    """Jobs run one at a time, so swapping the shared pipeline's scheduler is safe.

    None keeps the model's own."""
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

# A1111's sampler per diffusers class, from the diffusers docs' table. PNDM without its warm-up is
# "PLMS"; DPMSolverMultistep is "DPM++ 2M" only as dpmsolver++ of order 2.
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
# Samplers whose Automatic type is Karras or exponential: the model's own spacing is "Uniform".
_AUTOMATIC_IS_NOT_UNIFORM = {"DPM++ 2M", "DPM++ 2M SDE", "DPM++ SDE"}
# Samplers that pick their own timesteps: no schedule type applies.
_OWN_TIMESTEPS = {"LCM", "TCD"}


def sampler_of(scheduler: Any) -> str:
    """A1111's name for a scheduler object, with the schedule type its config gives.

    A class A1111 lacks keeps diffusers' name without "Scheduler" ("DEISMultistep")."""
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
    """The chosen scheduler, else the model's own."""
    return SCHEDULERS[name].a1111_name if name is not None else sampler_of(pipe.scheduler)


# --- AUTOMATIC1111's names ---------------------------------------------------------------------


def _key(text: str) -> str:
    """Compares as A1111's API does: "sgm_uniform" is "SGM Uniform"."""
    return " ".join(text.replace("_", " ").split()).casefold()


# Older sampler ids A1111's API still accepts.
_SAMPLER_ALIASES = {"k euler": "euler", "k euler a": "euler a", "k dpmpp 2m": "dpm++ 2m"}
# Schedule types A1111 1.9 split off the older combined names, longest first.
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
    """The table's name for an A1111 sampler and schedule type, by A1111 1.9's rules.

    None without a sampler: the default applies. An unknown pair raises UnknownScheduler."""
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
