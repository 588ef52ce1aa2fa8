"""LoRA adapters named by MODEL_ADAPTERS: fetched onto the share beside the model and fused
into the fp32 UNet at load, so a step costs what it cost without them.

MODEL_ADAPTERS is a comma-separated list of `repo:file[:scale]`, for example
`latent-consistency/lcm-lora-sdxl:pytorch_lora_weights.safetensors` or
`ByteDance/SDXL-Lightning:sdxl_lightning_4step_lora.safetensors:1.0`.
"""

from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured

FORM = "repo:file[:scale], comma-separated (e.g. org/name:weights.safetensors:1.0)"


@dataclass(frozen=True)
class Adapter:
    repo: str  # the hub repository, org/name
    file: str  # a .safetensors file in it
    scale: float = 1.0  # the LoRA's weight when fused


def parse_adapters(raw: str) -> tuple[Adapter, ...]:
    """The adapters of a MODEL_ADAPTERS value; a malformed entry stops the service at start."""
    adapters = []
    for entry in (part.strip() for part in raw.split(",")):
        if not entry:
            continue
        parts = entry.split(":")
        if len(parts) not in (2, 3) or "/" not in parts[0] or not parts[1]:
            raise ImproperlyConfigured(f"MODEL_ADAPTERS: {entry!r} is not {FORM}")
        if not parts[1].endswith(".safetensors"):
            raise ImproperlyConfigured(f"MODEL_ADAPTERS: {entry!r} must name a .safetensors file")
        try:
            scale = float(parts[2]) if len(parts) == 3 else 1.0
        except ValueError:
            raise ImproperlyConfigured(
                f"MODEL_ADAPTERS: scale in {entry!r} is not a number"
            ) from None
        adapters.append(Adapter(repo=parts[0], file=parts[1], scale=scale))
    return tuple(adapters)
