"""Defaults that follow the model, and what a request may ask of it.

Why it exists: a few-step model (SDXL-Turbo, or SDXL with an LCM, Hyper-SD, Lightning or TCD
LoRA) makes a usable image in 1 to 8 steps without guidance, and only with the scheduler it
was distilled for; at SDXL's defaults (20 steps, guidance 7: 40 UNet calls) the same request
takes a quarter of an hour on the reference CPU and comes back worse. Clients do not know
which model runs: Open WebUI sends its configured step count, webuiapi sends 20 steps,
guidance 7 and "Euler a". So the service recognises the model from its settings (MODEL_ID,
MODEL_ADAPTERS), takes that model's steps, guidance and scheduler as its defaults, and holds
what clients send to what the model can use: more steps or guidance than the preset allows
are clamped, a scheduler the model cannot use is replaced by the preset's. Every change is
reported (the job, the X-Adjusted header); explicit GEN_DEFAULT_* settings and the caps
GEN_STEPS_CAP / GEN_GUIDANCE_CAP win over a preset.

A request may bring its own recipe: a few-step LoRA its prompt names (lora_preset) replaces
the model's preset for that request (GenerationRules.under), and OpenAI's `quality` scales
the default steps (QUALITIES).
"""

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import BaseModel, ConfigDict

from imagegen.generation.schedulers import SCHEDULERS
from imagegen.model.adapters import Adapter

FALLBACK_STEPS = 20  # without a preset or GEN_DEFAULT_STEPS: the SDXL and SD 1.5 cards' count
FALLBACK_GUIDANCE = 7.0
# Schedulers that start at the last training timestep, as few-step models were distilled.
TRAILING = frozenset({"euler_trailing", "euler_a_trailing", "ddim_trailing", "dpmpp_2m_trailing"})
NO_GUIDANCE = 1.0  # at or below 1 diffusers runs no unconditional pass: one UNet batch of 1


@dataclass(frozen=True)
class Preset:
    """A model family's settings, from its model card."""

    name: str
    steps: int
    guidance: float
    scheduler: str
    max_steps: int  # what it was distilled for; more steps only cost time
    max_guidance: float
    schedulers: frozenset[str]  # what it works with; others are replaced by `scheduler`


def _few_step(name: str, steps: int, scheduler: str, schedulers: Iterable[str]) -> Preset:
    """A guidance-free distilled model: its steps by default, at most max(steps, 8)."""
    return Preset(
        name=name, steps=steps, guidance=0.0, scheduler=scheduler, max_steps=max(steps, 8),
        max_guidance=NO_GUIDANCE, schedulers=frozenset(schedulers) | {scheduler},
    )  # fmt: skip


def _hyper(match: re.Match) -> Preset:
    steps = int(match["steps"])
    if match["cfg"]:  # the CFG-preserving LoRAs: guidance 5 to 8, negative prompts work
        return Preset(
            name=f"hyper-sd-{steps}step-cfg", steps=steps, guidance=5.0,
            scheduler="ddim_trailing", max_steps=steps, max_guidance=8.0, schedulers=TRAILING,
        )  # fmt: skip
    # The 1-step "unified" LoRA runs any step count with TCD; the others with trailing DDIM.
    scheduler = "tcd" if steps == 1 else "ddim_trailing"
    return _few_step(f"hyper-sd-{steps}step", steps, scheduler, TRAILING | {"tcd"})


def _lightning(match: re.Match) -> Preset:
    """SDXL-Lightning's LoRAs are distilled for their own step count and capped there: more
    steps only cost time (webuiapi's 20 became 8 under a cap of 8: about 315 s for SDXL on 2
    vCPU, past GEN_SYNC_TIMEOUT; docs/performance.md)."""
    steps = int(match["steps"])
    return replace(
        _few_step(f"sdxl-lightning-{steps}step", steps, "euler_trailing", TRAILING),
        max_steps=steps,
    )


LCM_LORA = Preset(
    name="lcm-lora", steps=4, guidance=1.0, scheduler="lcm", max_steps=8,
    max_guidance=NO_GUIDANCE, schedulers=frozenset({"lcm"}),
)  # fmt: skip
TCD_LORA = _few_step("tcd-lora", 4, "tcd", ())
TURBO = Preset(
    name="turbo", steps=1, guidance=0.0, scheduler="euler_a_trailing", max_steps=4,
    max_guidance=NO_GUIDANCE, schedulers=TRAILING,
)  # fmt: skip


def _pattern(text: str) -> re.Pattern:
    return re.compile(text, re.IGNORECASE)  # hub ids are case-insensitive


# (repository, weight file) of LoRA adapters, and the preset each pair means.
ADAPTER_PRESETS: tuple[tuple[re.Pattern, re.Pattern, Callable[[re.Match], Preset]], ...] = (
    (_pattern(r"latent-consistency/lcm-lora-[\w.-]+"), _pattern(r".+"), lambda _: LCM_LORA),
    (
        _pattern(r"ByteDance/Hyper-SD"),
        _pattern(r"Hyper-SD(?:XL|15)-(?P<steps>\d+)steps?-(?P<cfg>CFG-)?lora\.safetensors"),
        _hyper,
    ),
    (
        _pattern(r"ByteDance/SDXL-Lightning"),
        _pattern(r"sdxl_lightning_(?P<steps>\d+)step_lora\.safetensors"),
        _lightning,
    ),
    (_pattern(r"h1t/TCD-SD(?:XL|15)-LoRA"), _pattern(r".+"), lambda _: TCD_LORA),
)
# Pipelines distilled as a whole, by MODEL_ID.
MODEL_PRESETS: tuple[tuple[re.Pattern, Preset], ...] = (
    (_pattern(r"stabilityai/sdxl-turbo"), TURBO),
    (_pattern(r"stabilityai/sd-turbo"), TURBO),
)


# The few-step LoRAs' published file names, recognised alone: a LoRA a prompt names is
# often a file an operator dropped into MODEL_DIR/loras under the name it was published with.
# (LCM's and TCD's repos publish `pytorch_lora_weights.safetensors`; the names people save
# them as are the repos'.)
LORA_FILE_PRESETS: tuple[tuple[re.Pattern, Callable[[re.Match], Preset]], ...] = (
    (_pattern(r"Hyper-SD(?:XL|15)-(?P<steps>\d+)steps?-(?P<cfg>CFG-)?lora\.safetensors"), _hyper),
    (_pattern(r"sdxl_lightning_(?P<steps>\d+)step_lora\.safetensors"), _lightning),
    (_pattern(r"lcm-lora-[\w.-]+\.safetensors"), lambda _: LCM_LORA),
    (_pattern(r"TCD-SD(?:XL|15)-LoRA\.safetensors"), lambda _: TCD_LORA),
)
# A preset back from its name (a request's LoRA carries the name of the recipe it is).
PRESET_NAMES: tuple[tuple[re.Pattern, Callable[[re.Match], Preset]], ...] = (
    (_pattern(r"sdxl-lightning-(?P<steps>\d+)step"), _lightning),
    (_pattern(r"hyper-sd-(?P<steps>\d+)step(?P<cfg>-cfg)?"), _hyper),
    (_pattern(LCM_LORA.name), lambda _: LCM_LORA),
    (_pattern(TCD_LORA.name), lambda _: TCD_LORA),
    (_pattern(TURBO.name), lambda _: TURBO),
)


def _adapter_preset(repo: str, file: str) -> Preset | None:
    for repo_rule, file_rule, make in ADAPTER_PRESETS:
        if repo_rule.fullmatch(repo) and (match := file_rule.fullmatch(file)):
            return make(match)
    return None


def preset_for(*, model_id: str, adapters: Iterable[Adapter]) -> Preset | None:
    """The preset of the configured model: the first adapter that has one (an adapter
    changes what its base model needs), else the model's own, else None."""
    for adapter in adapters:
        if (preset := _adapter_preset(adapter.repo, adapter.file)) is not None:
            return preset
    for repo, preset in MODEL_PRESETS:
        if repo.fullmatch(model_id):
            return preset
    return None


def lora_preset(*, repo: str | None, file: str) -> Preset | None:
    """The few-step recipe a LoRA a request names is: by its hub repo and file, as
    MODEL_ADAPTERS's are recognised, else by its file's name alone (a dropped file: no repo)."""
    if repo is not None and (preset := _adapter_preset(repo, file)) is not None:
        return preset
    name = file.rsplit("/", 1)[-1]
    for rule, make in LORA_FILE_PRESETS:
        if match := rule.fullmatch(name):
            return make(match)
    return None


def preset_named(name: str) -> Preset | None:
    """The preset of this name (Preset.name), or None."""
    for rule, make in PRESET_NAMES:
        if match := rule.fullmatch(name):
            return make(match)
    return None


# OpenAI's `quality` values and the recipe each runs: dall-e-3's `standard` and `hd` are
# `medium` and `high`; `auto` is the model's own choice, its defaults.
QUALITIES = {
    "low": "low", "medium": "medium", "high": "high",
    "auto": "medium", "standard": "medium", "hd": "high",
}  # fmt: skip
HIGH_STEPS = 1.5  # `high`: this many times the default steps, within the recipe's cap


# --- the rules a request meets ----------------------------------------------------------------


class Adjustment(BaseModel):
    """A value the service changed from what the client sent."""

    model_config = ConfigDict(frozen=True)

    field: str
    asked: int | float | str
    applied: int | float | str

    def header(self) -> str:
        return f"{self.field} {_text(self.asked)}->{_text(self.applied)}"


def _text(value: int | float | str) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class GenerationRules:
    """The defaults of omitted fields and the caps on sent ones, resolved once per process.

    `max_steps` and `max_guidance` clamp (None: no clamp; GEN_MAX_STEPS and GEN_MAX_GUIDANCE
    still refuse out-of-bounds values with a 400); `schedulers` are the names a request may
    choose (None: any), others get `scheduler`."""

    preset: str | None
    steps: int
    guidance: float
    scheduler: str | None  # None: the model's own
    max_steps: int | None
    max_guidance: float | None
    schedulers: frozenset[str] | None
    # What generation_rules made these from, less the preset (under() swaps the preset).
    settings: dict[str, Any] = field(default_factory=dict, compare=False)

    def under(self, preset: Preset) -> "GenerationRules":
        """These rules with `preset` in place of the model's: a request's few-step LoRA
        brings its own recipe. The GEN_DEFAULT_* settings are the model's defaults and give
        way to it (the prompt asked for the recipe); the caps (GEN_STEPS_CAP,
        GEN_GUIDANCE_CAP) and the form's bounds still hold."""
        defaults = {"default_steps": None, "default_guidance": None, "default_scheduler": None}
        return generation_rules(preset=preset, **{**self.settings, **defaults})

    def quality_steps(self, quality: str | None) -> int:
        """The default steps of a `quality` recipe (QUALITIES): `low` half the default (at
        least 1), `medium` the default, `high` HIGH_STEPS times it, within the form's bound
        (the caps apply in settle)."""
        recipe = QUALITIES.get(quality or "", "medium")
        if recipe == "low":
            return max(1, self.steps // 2)
        if recipe == "high":
            return min(math.ceil(self.steps * HIGH_STEPS), self.settings.get("max_steps", 10**6))
        return self.steps

    def settle(
        self,
        *,
        steps: int | None,
        guidance: float | None,
        scheduler: str | None,
        quality: str | None = None,
    ) -> tuple[int, float, str | None, list[Adjustment]]:
        """(steps, guidance, scheduler, adjustments): omitted values get the defaults (the
        steps those of `quality`'s recipe), sent ones are held to the caps and to the
        schedulers the model works with."""
        adjusted = []
        if scheduler is None:
            scheduler = self.scheduler
        elif self.schedulers is not None and scheduler not in self.schedulers:
            # Only a preset limits the schedulers, and then `scheduler` is set (generation_rules).
            assert self.scheduler is not None, "limited schedulers without a default one"
            adjusted.append(Adjustment(field="scheduler", asked=scheduler, applied=self.scheduler))
            scheduler = self.scheduler
        steps_cap = _lowest(self.max_steps, _scheduler_max_steps(scheduler))
        if steps is None:
            default = self.quality_steps(quality)
            steps = default if steps_cap is None else min(default, steps_cap)
        elif steps_cap is not None and steps > steps_cap:
            adjusted.append(Adjustment(field="steps", asked=steps, applied=steps_cap))
            steps = steps_cap
        if guidance is None:
            guidance = self.guidance
        elif self.max_guidance is not None and guidance > self.max_guidance:
            adjusted.append(Adjustment(field="guidance", asked=guidance, applied=self.max_guidance))
            guidance = self.max_guidance
        return steps, guidance, scheduler, adjusted


def _scheduler_max_steps(name: str | None) -> int | None:
    return SCHEDULERS[name].max_steps if name in SCHEDULERS else None


def _lowest(*caps: int | None) -> int | None:
    return min((cap for cap in caps if cap is not None), default=None)


def generation_rules(
    *,
    preset: Preset | None,
    default_steps: int | None,
    default_guidance: float | None,
    default_scheduler: str | None,
    steps_cap: int | None,
    guidance_cap: float | None,
    max_steps: int,
    max_guidance: float,
) -> GenerationRules:
    """The rules from the settings (None: not set). An explicit setting wins over the preset,
    the preset over the fallbacks (20 steps, guidance 7, the model's own scheduler, no caps).
    A default that is not explicit stays within the cap (GEN_STEPS_CAP=8 alone makes the
    default 8); a cap that is not explicit is raised to an explicit default
    (GEN_DEFAULT_STEPS=12 with a 4-step preset allows 12); settings.py refuses an explicit
    default above an explicit cap. Defaults stay within the form's bounds (GEN_MAX_STEPS,
    GEN_MAX_GUIDANCE)."""

    def from_preset(attribute: str, fallback):
        return getattr(preset, attribute) if preset is not None else fallback

    def resolve(explicit, cap, attribute: str, fallback, bound):
        cap = cap if cap is not None else from_preset(f"max_{attribute}", None)
        default = explicit if explicit is not None else from_preset(attribute, fallback)
        if explicit is None and cap is not None:
            default = min(default, cap)
        return min(default, bound), None if cap is None else max(cap, default)

    steps, max_steps_applied = resolve(default_steps, steps_cap, "steps", FALLBACK_STEPS, max_steps)
    guidance, max_guidance_applied = resolve(
        default_guidance, guidance_cap, "guidance", FALLBACK_GUIDANCE, max_guidance
    )
    scheduler = default_scheduler or from_preset("scheduler", None)
    settings = {
        "default_steps": default_steps, "default_guidance": default_guidance,
        "default_scheduler": default_scheduler, "steps_cap": steps_cap,
        "guidance_cap": guidance_cap, "max_steps": max_steps, "max_guidance": max_guidance,
    }  # fmt: skip
    return GenerationRules(
        preset=from_preset("name", None),
        steps=steps,
        guidance=guidance,
        scheduler=scheduler,
        max_steps=max_steps_applied,
        max_guidance=max_guidance_applied,
        schedulers=preset.schedulers | {scheduler} if preset is not None else None,
        settings=settings,
    )
