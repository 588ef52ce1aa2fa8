"""Tiny random-weight ESRGAN-family networks and the files people keep them in: the Real-ESRGAN
(basicsr) key layout as the network names them, the original ESRGAN layout (`model.N`,
`model.1.sub.N.RDBk.convj.0`) written here from the basicsr names independently of the
loader's own renaming, bare or under `params_ema`/`params`, as `.safetensors` or `.pth`.

Weights are drawn wider than PyTorch's default initialisation and the last bias is 0.5, so
the output spans most of the 0-255 range: a small difference between two runs shows."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

from imagegen.model.upscalers.rrdbnet import RRDBNet, RRDBShape

# Real-ESRGAN's x4, x2 and x1: the same network, the smaller scales behind a pixel unshuffle.
X4 = RRDBShape(in_channels=3, out_channels=3, features=8, growth=4, blocks=2, upsamples=2)
X2 = RRDBShape(in_channels=12, out_channels=3, features=8, growth=4, blocks=2, upsamples=2)
X1 = RRDBShape(in_channels=48, out_channels=3, features=8, growth=4, blocks=1, upsamples=2)


def tiny_net(shape: RRDBShape = X4, seed: int = 0) -> RRDBNet:
    net = RRDBNet(shape).eval().requires_grad_(False)
    generator = torch.Generator().manual_seed(seed)
    for parameter in net.parameters():
        parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.1)
    net.conv_last.bias.fill_(0.5)
    return net


def original_layout(state: dict[str, torch.Tensor], shape: RRDBShape) -> dict[str, torch.Tensor]:
    """The basicsr names as the original ESRGAN code's one Sequential numbers them: model.0,
    the trunk at model.1.sub (its closing convolution last), then per 2x stage an upsample, a
    convolution (model.3, model.6 ...) and an activation, then conv_hr and conv_last."""
    stages = shape.upsamples
    renamed = {}
    for name, value in state.items():
        module, kind = name.rsplit(".", 1)
        parts = module.split(".")
        if module == "conv_first":
            new = "model.0"
        elif module == "conv_body":
            new = f"model.1.sub.{shape.blocks}"
        elif parts[0] == "body":
            new = f"model.1.sub.{parts[1]}.RDB{parts[2][-1]}.{parts[3]}.0"
        elif module.startswith("conv_up"):
            new = f"model.{3 * int(module.removeprefix('conv_up'))}"
        elif module == "conv_hr":
            new = f"model.{3 * stages + 2}"
        else:
            assert module == "conv_last", module
            new = f"model.{3 * stages + 4}"
        renamed[f"{new}.{kind}"] = value
    return renamed


def write_weights(path: Path, state: dict[str, object]) -> Path:
    """`state` as a .safetensors or .pth file by the path's suffix (a wrapper dict, such as
    {"params_ema": ...}, only as .pth, as Real-ESRGAN saves it)."""
    if path.suffix == ".safetensors":
        tensors = {name: value.contiguous() for name, value in state.items()}  # type: ignore[attr-defined]
        save_file(tensors, str(path))
    else:
        torch.save(state, path)
    return path


ESRGAN_REPO = "testorg/tiny-esrgan"


def place_on_hub(hub_root: Path) -> str:
    """The tiny x4 network as a Real-ESRGAN `.pth` (under `params_ema`) and the tiny x2 one as a
    bare `.safetensors` in ESRGAN_REPO of the test hub's folder; returns the repo id."""
    repo = hub_root / ESRGAN_REPO
    repo.mkdir(parents=True, exist_ok=True)
    write_weights(repo / "tiny-x4.pth", {"params_ema": tiny_net(X4).state_dict()})
    write_weights(repo / "tiny-x2.safetensors", dict(tiny_net(X2, seed=1).state_dict()))
    return ESRGAN_REPO
