"""Loads a component's weights tensor by tensor, cast to fp32 as they arrive.

diffusers' own loading reads a component's whole fp16 state dict, then casts it into the
fp32 model: for a moment both are in memory, 1.5x the fp32 size (for SDXL's 10 GB UNet,
15 GB of a 16 GiB container). Here the model is built without memory (accelerate's empty
weights), and each tensor is read with plain reads (no mmap, so the file's pages never count
as the process's memory), cast, and put in place before the next is read: the peak stays
near the fp32 size. The page cache of what was read is dropped as it goes, since on the
share those pages only crowd the container's memory limit.

The safetensors layout is read directly: an 8-byte little-endian header length, a JSON
header of {name: {dtype, shape, data_offsets}}, then the data.
"""

import importlib
import json
import logging
import math
import os
import struct
from pathlib import Path
from typing import Any

import torch
from accelerate import init_empty_weights
from accelerate.utils import set_module_tensor_to_device

from imagegen.hub import weight_variant

log = logging.getLogger(__name__)

DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}  # fmt: skip
FLOATS = {torch.float64, torch.float32, torch.float16, torch.bfloat16}


def read_safetensors(path: Path, dtype: torch.dtype):
    """Yields (name, tensor) one at a time, floating-point tensors cast to `dtype`."""
    size = path.stat().st_size
    with open(path, "rb", buffering=0) as f:
        (header_size,) = struct.unpack("<Q", _read_bytes(f, 8))
        if header_size > size - 8:
            raise ValueError(f"{path}: not a safetensors file (header larger than the file)")
        header = json.loads(_read_bytes(f, header_size))
        header.pop("__metadata__", None)
        base = 8 + header_size
        for name, entry in sorted(header.items(), key=lambda item: item[1]["data_offsets"][0]):
            begin, end = entry["data_offsets"]
            if entry["dtype"] not in DTYPES:
                raise ValueError(f"{path}: {name} has the unsupported dtype {entry['dtype']}")
            stored = DTYPES[entry["dtype"]]
            count = math.prod(entry["shape"])
            if not 0 <= begin <= end <= size - base or end - begin != count * stored.itemsize:
                raise ValueError(f"{path}: {name}'s offsets do not fit its shape or the file")
            f.seek(base + begin)
            # torch.empty, not bytearray: no zero-filling under the GIL, and the pages are
            # first touched by the read, which runs without it.
            raw = torch.empty(end - begin, dtype=torch.uint8)
            _read_exactly(f, memoryview(raw.numpy()))
            tensor = raw.view(stored).reshape(entry["shape"])
            tensor = tensor.to(dtype) if stored in FLOATS else tensor
            os.posix_fadvise(f.fileno(), base + begin, end - begin, os.POSIX_FADV_DONTNEED)
            yield name, tensor


def _read_bytes(f, count: int) -> bytes:
    buffer = bytearray(count)
    _read_exactly(f, memoryview(buffer))
    return bytes(buffer)


def _read_exactly(f, view: memoryview) -> None:
    """A read may return less (network file systems, reads over 2 GiB): read until full."""
    done = 0
    while done < len(view):
        got = f.readinto(view[done:])
        if not got:
            raise EOFError(f"{f.name}: the file ends before its header says")
        done += got


def weight_files(folder: Path, variant: str | None) -> list[Path]:
    """The component's safetensors files for this variant (sharded or not), else the default."""
    files = sorted(folder.glob("*.safetensors"))
    chosen = [f for f in files if variant and weight_variant(f.name) == variant]
    return chosen or [f for f in files if weight_variant(f.name) is None]


def load_component(path: Path, name: str, library: str, class_name: str, *,
                   variant: str | None, dtype: torch.dtype) -> Any | None:  # fmt: skip
    """Builds one torch component of a pipeline from its folder, streaming its weights;
    None when the file's tensor names do not match the model's."""
    cls = getattr(importlib.import_module(library), class_name)
    folder = path / name
    if library == "diffusers":
        config = cls.load_config(folder)
        with init_empty_weights():
            model = cls.from_config(config)
    else:
        config = cls.config_class.from_pretrained(folder)
        with init_empty_weights():
            model = cls(config)
    expected = dict(model.state_dict())
    unexpected = []
    for file in weight_files(folder, variant):
        for key, tensor in read_safetensors(file, dtype):
            if key in expected:
                set_module_tensor_to_device(model, key, "cpu", value=tensor)
                expected.pop(key)
            else:
                unexpected.append(key)
    if hasattr(model, "tie_weights"):
        model.tie_weights()
    missing = [key for key, value in model.state_dict().items() if value.device.type == "meta"]
    if missing or unexpected:
        # Names this loader does not map (old layouts diffusers renames on load): let
        # diffusers load this component its own way.
        log.warning(
            "%s: %d tensors unmatched, %d missing; loading it with diffusers instead",
            name, len(unexpected), len(missing),
        )  # fmt: skip
        return None
    return model.eval()


def streamed_components(path: Path, *, variant: str | None, dtype: torch.dtype) -> dict[str, Any]:
    """Every torch component named in model_index.json, loaded by load_component."""
    index = json.loads((path / "model_index.json").read_text())
    components = {}
    for name, value in index.items():
        if name.startswith("_") or not isinstance(value, list) or None in value:
            continue
        library, class_name = value
        if library not in ("diffusers", "transformers"):
            continue
        cls = getattr(importlib.import_module(library), class_name)
        if isinstance(cls, type) and issubclass(cls, torch.nn.Module):
            component = load_component(
                path, name, library, class_name, variant=variant, dtype=dtype
            )
            if component is not None:
                components[name] = component
    return components
