"""The schedulers a generation may ask for by name, and AUTOMATIC1111's names for them.

Why it exists: few-step models (LCM, Hyper-SD, SDXL-Lightning, SDXL-Turbo) need a scheduler
their base model does not ship with, often with "trailing" timestep spacing (the schedule
starts at the last training timestep, as they were distilled). The native API names a
scheduler with one short id (`euler_trailing`); the A1111 adapter receives a sampler and a
schedule type ("DPM++ 2M" + "Karras") and maps them here, so both speak of the same table.

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
    def label(self) -> str:
        """The A1111 text: "DPM++ 2M, Schedule type: Karras" (the infotext's form)."""
        sampler, schedule = self.a1111[0]
        return sampler if schedule == "Automatic" else f"{sampler}, Schedule type: {schedule}"


_TRAILING = {"timestep_spacing": "trailing"}
_DPMPP_2M = {"algorithm_type": "dpmsolver++", "solver_order": 2, "use_karras_sigmas": False}
_AUTO, _UNIFORM, _KARRAS, _SGM = A1111_SCHEDULES


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


class UnknownScheduler(ValueError):
    """A name outside the table; the message lists the valid ones."""


def scheduler_named(name: str) -> Scheduler:
    try:
        return SCHEDULERS[name]
    except KeyError:
        raise UnknownScheduler(f"unknown scheduler {name!r}; valid: {', '.join(NAMES)}") from None


def is_scheduler_name(value: str | None) -> bool:
    """True for a name of the table (a record's `scheduler` may instead be the model's own
    scheduler's class name, when none was chosen)."""
    return value in SCHEDULERS


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
