"""What a pull will download, known before it starts, so that Pull can say it first.

Only a pull asks the hub for exact sizes. Before that, a person should still know Pull fetches
gigabytes. Only the shipped model has a documented figure."""

from imagegen.model.adapters import DEFAULT_MODEL_ADAPTERS, DEFAULT_MODEL_ID, parse_adapters
from imagegen.model.decoder import TAESDXL
from imagegen.model.hub import ModelSource

# SDXL base's fp16 files that diffusers reads, as a pull's `bytes_total` reported them
# (docs/image-api.md's status example; 6.94 GB in a measured pull, docs/azure.md).
SDXL_BASE_FP16_BYTES = 6_938_040_682
# The default LoRA file (a rank-64 SDXL LoRA in fp16) as the hub lists it: 394 MB.
LIGHTNING_4STEP_LORA_BYTES = 394_000_000
# TAESDXL's fp32 weights (2,445,063 parameters at 4 bytes, plus header) and config.
TAESDXL_BYTES = 9_800_000
# By `repo:file`: a scale changes how an adapter fuses, not what is fetched.
_KNOWN_ADAPTERS = {
    a.label: LIGHTNING_4STEP_LORA_BYTES for a in parse_adapters(DEFAULT_MODEL_ADAPTERS)
}


def documented_download_bytes(source: ModelSource) -> int | None:
    """About how many bytes a cold pull of `source` fetches, or None if unknown."""
    if source.model_id.casefold() != DEFAULT_MODEL_ID.casefold():
        return None
    if source.revision != "main" or source.variant != "fp16":
        return None
    if source.decoder.tiny and source.decoder.repo not in (None, TAESDXL):  # None: by type
        return None
    if any(adapter.label not in _KNOWN_ADAPTERS for adapter in source.adapters):
        return None
    if source.inpaint is not None:  # INPAINT_MODEL_ID: no documented figure for its UNet
        return None
    decoder = TAESDXL_BYTES if source.decoder.tiny else 0
    return SDXL_BASE_FP16_BYTES + sum(_KNOWN_ADAPTERS[a.label] for a in source.adapters) + decoder
