"""Loads a component's weights into one fp32 block per file, cast chunk by chunk.

Diffusers holds the fp16 state dict and the fp32 model at once: 1.5x the fp32 size. For SDXL's
10 GB UNet that is 15 GB of a 16 GiB container. Here the model is built empty (accelerate),
and each file's float tensors become views into one fp32 block. A reader thread fills two 64
MiB buffers with plain reads, not mmap, while the other is cast. So the peak stays near the
fp32 size, and 30 large casts beat a thousand small ones (bench/load_bench.py). Read pages
leave the page cache: they only crowd the memory limit.

Safetensors layout: an 8-byte little-endian header length, a JSON header, then the data."""

import importlib
import json
import logging
import math
import os
import re
import struct
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate import init_empty_weights
from accelerate.utils import set_module_tensor_to_device
from transformers.initialization import no_init_weights

from imagegen.model.components import pipeline_components

log = logging.getLogger(__name__)
_CONSTRUCTION = threading.Lock()

DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}  # fmt: skip
FLOATS = {torch.float64, torch.float32, torch.float16, torch.bfloat16}


WEIGHTS_SUFFIX = ".safetensors"
_SHARD = re.compile(r"-\d{5}-of-\d{5}$")

CHUNK_BYTES = 64 * 2**20
ALIGN_BYTES = 64  # what torch's CPU allocator gives a tensor of its own


def weight_variant(filename: str) -> str | None:
    """`a.fp16.safetensors` and `a.fp16-00001-of-00002.safetensors` -> fp16; `a.safetensors` ->
    None.

    The streaming loader uses it to name a component's files on the share."""
    stem = _SHARD.sub("", filename[: -len(WEIGHTS_SUFFIX)])
    return stem.rsplit(".", 1)[1] if "." in stem else None


@dataclass(frozen=True)
class Entry:
    name: str
    stored: torch.dtype
    shape: tuple[int, ...]
    offset: int  # in the file
    length: int  # bytes

    @property
    def count(self) -> int:
        return self.length // self.stored.itemsize


def _raw_header(f, path: Path) -> tuple[dict[str, Any], int]:
    """The JSON header and where the data begins."""
    size = path.stat().st_size
    (header_size,) = struct.unpack("<Q", _read_bytes(f, 8, 0))
    if header_size > size - 8:
        raise ValueError(f"{path}: not a safetensors file (header larger than the file)")
    return json.loads(_read_bytes(f, header_size, 8)), 8 + header_size


def read_metadata(f, path: Path) -> dict[str, str]:
    """The file's `__metadata__`: free-form strings, {} without any."""
    return _raw_header(f, path)[0].get("__metadata__") or {}


def read_header(f, path: Path) -> list[Entry]:
    """The file's tensors in file order, every offset checked against the file size."""
    size = path.stat().st_size
    header, base = _raw_header(f, path)
    header.pop("__metadata__", None)
    entries = []
    for name, entry in sorted(header.items(), key=lambda item: item[1]["data_offsets"][0]):
        begin, end = entry["data_offsets"]
        if entry["dtype"] not in DTYPES:
            raise ValueError(f"{path}: {name} has the unsupported dtype {entry['dtype']}")
        stored = DTYPES[entry["dtype"]]
        count = math.prod(entry["shape"])
        if not 0 <= begin <= end <= size - base or end - begin != count * stored.itemsize:
            raise ValueError(f"{path}: {name}'s offsets do not fit its shape or the file")
        entries.append(Entry(name, stored, tuple(entry["shape"]), base + begin, end - begin))
    return entries


def _layout(entries: list[Entry], dtype: torch.dtype) -> tuple[dict[str, int], int]:
    """Each float tensor's start in the block, and the block's length.

    Starts are 64-byte aligned: unaligned weights made images differ from diffusers'."""
    starts, element = {}, 0
    align = ALIGN_BYTES // dtype.itemsize
    for e in entries:
        if e.stored in FLOATS:
            element = -(-element // align) * align
            starts[e.name] = element
            element += e.count
    return starts, element


Chunk = tuple[int, int, torch.dtype, int]


def _chunks(entries: list[Entry], starts: dict[str, int]) -> list[Chunk]:
    """(file offset, bytes, stored dtype, first block element) of each chunk to cast.

    A chunk is a run of tensors adjacent in file and block, cut at CHUNK_BYTES."""
    runs: list[Chunk] = []
    for e in entries:
        if e.stored not in FLOATS or not e.length:
            continue
        if runs:
            offset, length, stored, first = runs[-1]
            if (stored == e.stored and offset + length == e.offset
                    and first + length // stored.itemsize == starts[e.name]):  # fmt: skip
                runs[-1] = (offset, length + e.length, stored, first)
                continue
        runs.append((e.offset, e.length, e.stored, starts[e.name]))
    chunks = []
    for offset, length, stored, first in runs:
        step = max(CHUNK_BYTES - CHUNK_BYTES % stored.itemsize, stored.itemsize)
        for done in range(0, length, step):
            part = min(step, length - done)
            chunks.append((offset + done, part, stored, first + done // stored.itemsize))
    return chunks


def read_safetensors(path: Path, dtype: torch.dtype):
    """Yields (name, tensor) in file order; float tensors cast to `dtype`, others as stored."""
    with open(path, "rb", buffering=0) as f:
        entries = read_header(f, path)
        starts, total = _layout(entries, dtype)
        block = torch.empty(total, dtype=dtype)
        chunks = _chunks(entries, starts)
        if chunks:
            _cast_chunks(f, chunks, block)
        for e in entries:
            if e.stored in FLOATS:
                # A view: the block lives as long as any of the file's tensors.
                yield e.name, block[starts[e.name] : starts[e.name] + e.count].view(e.shape)
            else:
                raw = torch.empty(e.length, dtype=torch.uint8)
                # .data: memoryview(array), typed (numpy's types give arrays __buffer__ on 3.12+)
                _pread_exactly(f, raw.numpy().data, e.offset)
                yield e.name, raw.view(e.stored).reshape(e.shape)


def read_entry(f, entry: Entry, dtype: torch.dtype) -> torch.Tensor:
    """One tensor of an open file; float cast to `dtype`, others as stored.

    For reading a file a few tensors at a time."""
    raw = torch.empty(entry.length, dtype=torch.uint8)
    _pread_exactly(f, raw.numpy().data, entry.offset)
    tensor = raw.view(entry.stored).reshape(entry.shape)
    return tensor.to(dtype) if entry.stored in FLOATS else tensor


def _cast_chunks(f, chunks: list[Chunk], block: torch.Tensor) -> None:
    # torch.empty, not bytearray: no zero-filling under the GIL.
    largest = max(length for _, length, _, _ in chunks)
    buffers = [torch.empty(largest, dtype=torch.uint8) for _ in range(2)]

    def read(index: int) -> torch.Tensor:
        offset, length, _, _ = chunks[index]
        raw = buffers[index % 2][:length]
        _pread_exactly(f, raw.numpy().data, offset)
        os.posix_fadvise(f.fileno(), offset, length, os.POSIX_FADV_DONTNEED)
        return raw

    with ThreadPoolExecutor(1, thread_name_prefix="weights-read") as reader:
        pending = reader.submit(read, 0)
        for index, (_, length, stored, first) in enumerate(chunks):
            raw = pending.result()
            if index + 1 < len(chunks):
                # Into the other buffer: this one is free once cast below.
                pending = reader.submit(read, index + 1)
            count = length // stored.itemsize
            block[first : first + count].copy_(raw.view(stored))


def _read_bytes(f, count: int, offset: int) -> bytes:
    buffer = bytearray(count)
    _pread_exactly(f, memoryview(buffer), offset)
    return bytes(buffer)


def _pread_exactly(f, view: memoryview, offset: int) -> None:
    """Reads at `offset` until `view` is full.

    A read may return less on network file systems or over 2 GiB."""
    done = 0
    while done < len(view):
        got = os.preadv(f.fileno(), [view[done:]], offset + done)
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
    """Builds one torch component from its folder, streaming its weights.

    None when the tensor names do not match the model's."""
    cls = getattr(importlib.import_module(library), class_name)
    folder = path / name
    # Empty meta weights, and no random init: each init call still costs about 1 ms of Python, a
    # thousand times over. Both patch torch process-wide, so one construction at a time.
    with _CONSTRUCTION, init_empty_weights(), no_init_weights():
        if library == "diffusers":
            model = cls.from_config(cls.load_config(folder))
        else:
            model = cls(cls.config_class.from_pretrained(folder))
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
        # Names we do not map (old layouts diffusers renames): let diffusers load this one.
        log.warning(
            "%s: %d tensors unmatched, %d missing; loading it with diffusers instead",
            name, len(unexpected), len(missing),
        )  # fmt: skip
        return None
    return model.eval()


def streamed_components(
    path: Path,
    *,
    variant: str | None,
    dtype: torch.dtype,
    skip: frozenset[str] = frozenset(),
    prepare: Mapping[str, Callable[[Any], None]] | None = None,
) -> dict[str, Any]:
    """Every torch component in model_index.json but `skip`, loaded by load_component.

    Each `prepare` function runs before the next load, so adapters fuse while the UNet is
    alone."""
    prepare = prepare or {}
    index = json.loads((path / "model_index.json").read_text())
    listed = pipeline_components(index)
    components = {}
    for name in sorted(listed, key=lambda name: name not in prepare):
        library, class_name = listed[name]
        if library not in ("diffusers", "transformers") or name in skip:
            continue
        cls = getattr(importlib.import_module(library), class_name)
        if isinstance(cls, type) and issubclass(cls, torch.nn.Module):
            component = load_component(
                path, name, library, class_name, variant=variant, dtype=dtype
            )
            if component is not None:
                if name in prepare:
                    prepare[name](component)
                components[name] = component
    return components
