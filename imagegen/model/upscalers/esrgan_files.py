"""Reads the upscaler files people already have into an RRDBNet: `.safetensors` or `.pth`,
a bare state dict or one under `params_ema` (or `params`) as Real-ESRGAN saves them, in the
Real-ESRGAN (basicsr) key layout or the original ESRGAN one (`model.0`, `model.1.sub.N.RDBk`),
BSRGAN's (`RRDB_trunk`, `trunk_conv`) too. The network's size and scale are read from the
weights' names and shapes, never from the file's name, which people rename freely.

A `.pth` is read with `weights_only=True`: a pickle can run code, and an upscaler is often a
file from a site that is not a hub."""

import pickle
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from imagegen.model.upscalers.rrdbnet import RRDBNet, RRDBShape

SUFFIXES = (".safetensors", ".pth")
WRAPPERS = ("params_ema", "params")  # Real-ESRGAN keeps the EMA weights, the better ones, first

# The original ESRGAN and BSRGAN names of the Real-ESRGAN layout's modules.
_RENAMES = (
    (
        re.compile(r"^model\.1\.sub\.(\d+)\.RDB(\d)\.conv(\d)\.0\.(weight|bias)$"),
        r"body.\1.rdb\2.conv\3.\4",
    ),
    (
        re.compile(r"^RRDB_trunk\.(\d+)\.RDB(\d)\.conv(\d)\.(weight|bias)$"),
        r"body.\1.rdb\2.conv\3.\4",
    ),
    (re.compile(r"^model\.0\.(weight|bias)$"), r"conv_first.\1"),
    (re.compile(r"^trunk_conv\.(weight|bias)$"), r"conv_body.\1"),
    (re.compile(r"^upconv(\d)\.(weight|bias)$"), r"conv_up\1.\2"),
    (re.compile(r"^HRconv\.(weight|bias)$"), r"conv_hr.\1"),
)
_TRUNK_END = re.compile(
    r"^model\.1\.sub\.(\d+)\.(weight|bias)$"
)  # conv_body in the original layout
_TAIL = re.compile(r"^model\.(\d+)\.(weight|bias)$")  # upsampling convs, conv_hr, conv_last
_BLOCK = re.compile(r"^body\.(\d+)\.")
_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")  # the class a weights-only unpickler refused
_UPSAMPLE = re.compile(r"^conv_up(\d+)\.weight$")


class UpscalerFileError(ValueError):
    """A file that is not an upscaler this project can run; the message names the file and
    what is wrong with it."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"upscaler file {path.name}: {problem}")
        self.path, self.problem = path, problem


def load_esrgan(path: Path) -> RRDBNet:
    """The network of an ESRGAN-family file, fp32, in eval mode, weights checked against the
    shape they imply (a missing or misshapen tensor is an UpscalerFileError)."""
    weights = to_basicsr_layout(unwrap(read_weights(path), path), path)
    shape = shape_of(weights, path)
    net = RRDBNet(shape)
    try:
        net.load_state_dict(weights, strict=True)
    except RuntimeError as exc:
        first = str(exc).splitlines()[1].strip() if "\n" in str(exc) else str(exc)
        raise UpscalerFileError(path, f"the weights do not fit an RRDBNet: {first}") from exc
    return net.float().eval().requires_grad_(False)


def read_weights(path: Path) -> Mapping[str, Any]:
    if path.suffix not in SUFFIXES:
        raise UpscalerFileError(path, f"the name must end in {' or '.join(SUFFIXES)}")
    if not path.is_file():
        raise UpscalerFileError(path, "no such file")
    try:
        if path.suffix == ".safetensors":
            return load_file(path, device="cpu")
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except (SafetensorError, OSError, RuntimeError, EOFError, ValueError) as exc:
        raise UpscalerFileError(
            path, f"not a readable {path.suffix} file ({_first_line(exc)})"
        ) from exc
    except pickle.UnpicklingError as exc:
        found = _GLOBAL.search(str(exc))
        what = f"a {found.group(1)}" if found else _first_line(exc)
        raise UpscalerFileError(path, f"not a plain state dict: it holds {what}") from exc
    if not isinstance(loaded, Mapping):
        raise UpscalerFileError(path, f"holds a {type(loaded).__name__}, not a state dict")
    return loaded


def unwrap(loaded: Mapping[str, Any], path: Path) -> dict[str, torch.Tensor]:
    """The state dict itself: under `params_ema` or `params` when the file has one of them."""
    for key in WRAPPERS:
        if isinstance(loaded.get(key), Mapping):
            loaded = loaded[key]
            break
    weights = {name: value for name, value in loaded.items() if isinstance(value, torch.Tensor)}
    if not weights:
        raise UpscalerFileError(path, "holds no tensors")
    return {name: value.float() for name, value in weights.items()}


def to_basicsr_layout(weights: dict[str, torch.Tensor], path: Path) -> dict[str, torch.Tensor]:
    """The weights under the Real-ESRGAN (basicsr) names; files already in it pass unchanged.

    In the original layout the network is one Sequential: `model.0` the first convolution,
    `model.1.sub` the trunk (its last entry the trunk's closing convolution), then an upsample,
    a convolution and an activation per 2x stage, then conv_hr and conv_last: the numbered
    convolutions after the trunk, in order, are conv_up1..n, conv_hr, conv_last."""
    renamed: dict[str, torch.Tensor] = {}
    tail: dict[int, dict[str, torch.Tensor]] = {}
    for name, value in weights.items():
        for pattern, replacement in _RENAMES:
            if pattern.match(name):
                name = pattern.sub(replacement, name)
                break
        else:
            if (end := _TRUNK_END.match(name)) is not None:
                name = f"conv_body.{end.group(2)}"
            elif (numbered := _TAIL.match(name)) is not None:
                tail.setdefault(int(numbered.group(1)), {})[numbered.group(2)] = value
                continue
        renamed[name] = value
    if tail:
        if len(tail) < 2:
            raise UpscalerFileError(path, "the original layout's model.N list ends too soon")
        order = sorted(tail)
        names = [f"conv_up{stage}" for stage in range(1, len(order) - 1)] + ["conv_hr", "conv_last"]
        for index, module in zip(order, names, strict=True):
            for kind, value in tail[index].items():
                renamed[f"{module}.{kind}"] = value
    return renamed


def shape_of(weights: Mapping[str, torch.Tensor], path: Path) -> RRDBShape:
    """The network's size read from the weights: the first and last convolutions give the
    channels and the features, a dense block's first convolution the growth, the highest
    block index the depth, the conv_up entries the upsampling stages."""
    needed = (
        "conv_first.weight",
        "body.0.rdb1.conv1.weight",
        "conv_body.weight",
        "conv_last.weight",
    )
    missing = [name for name in needed if name not in weights]
    if missing:
        raise UpscalerFileError(
            path,
            f"not an ESRGAN-family (RRDBNet) network: no {', '.join(missing)} "
            "(nor their original-layout names)",
        )
    first, last = weights["conv_first.weight"], weights["conv_last.weight"]
    if first.ndim != 4 or last.ndim != 4:
        raise UpscalerFileError(path, "conv_first and conv_last must be 4-d convolution weights")
    in_channels, out_channels = first.shape[1], last.shape[0]
    if out_channels != 3 or in_channels not in (3, 12, 48):
        raise UpscalerFileError(
            path,
            f"{in_channels} input and {out_channels} output channels: only RGB networks (3 in, "
            "or 12 or 48 behind a pixel unshuffle, and 3 out) are supported",
        )
    upsamples = sum(1 for name in weights if _UPSAMPLE.match(name))
    shape = RRDBShape(
        in_channels=in_channels,
        out_channels=out_channels,
        features=first.shape[0],
        growth=weights["body.0.rdb1.conv1.weight"].shape[0],
        blocks=1 + max(int(m.group(1)) for name in weights if (m := _BLOCK.match(name))),
        upsamples=upsamples,
    )
    if 2**upsamples < shape.unshuffle:
        raise UpscalerFileError(
            path,
            f"{upsamples} upsampling stages behind a {shape.unshuffle}x unshuffle make the "
            "image smaller",
        )
    return shape


def _first_line(exc: Exception) -> str:
    """The library's own words, cut to their first sentence (torch's go on for a page)."""
    return str(exc).strip().splitlines()[0].split(". ")[0]
