"""What a pull will download, known before it starts, so that Pull can say it first.

The service learns a pull's exact size from the hub's file listing, and only a pull asks the
hub for it (/model/status then shows it in `download.bytes_total`, and keeps it after a
failure). Before any pull a person still deserves to know that Pull fetches gigabytes: for the
model the service ships with, that is a documented figure; any other configuration has none
here, and the page says the size shows once the download starts.
"""

from imagegen.model.adapters import DEFAULT_MODEL_ADAPTERS, DEFAULT_MODEL_ID, parse_adapters
from imagegen.model.decoder import TAESDXL
from imagegen.model.hub import ModelSource

# SDXL base's fp16 files that diffusers reads (imagegen.model.hub.wanted_files), as a pull's
# `bytes_total` reported them (docs/image-api.md's status example; 6.94 GB in
# a measured pull, docs/azure.md).
SDXL_BASE_FP16_BYTES = 6_938_040_682
# The default LoRA file (a rank-64 SDXL LoRA in fp16) as the hub lists it: 394 MB.
LIGHTNING_4STEP_LORA_BYTES = 394_000_000
# TAESDXL's fp32 weights (AutoencoderTiny's 2,445,063 parameters at 4 bytes, with the file's
# header) and its config: the default model's decoder (imagegen.model.decoder.default_decoder).
TAESDXL_BYTES = 9_800_000
# By `repo:file` (an adapter's scale changes how it is fused, not what is fetched).
_KNOWN_ADAPTERS = {
    a.label: LIGHTNING_4STEP_LORA_BYTES for a in parse_adapters(DEFAULT_MODEL_ADAPTERS)
}


def documented_download_bytes(source: ModelSource) -> int | None:
    """About how many bytes a cold pull of `source` fetches: the default model's fp16 files,
    the known adapters named with it and TAESDXL when it decodes; None for any other
    configuration (an inpainting checkpoint among them)."""
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
