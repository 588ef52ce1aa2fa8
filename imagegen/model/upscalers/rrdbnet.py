"""The ESRGAN family's network, RRDBNet: ESRGAN, Real-ESRGAN, 4x-UltraSharp and most community
upscalers are this one architecture with other weights.

Spandrel, which ComfyUI and the A1111 forks load these files with, needs a torchvision whose
operators import beside the CPU torch this project runs; the registry's does not, so the
network is here. Its module names are the Real-ESRGAN (basicsr) layout's, so a file in that
layout loads as it is and one in the original ESRGAN layout is renamed to it first
(`esrgan_files.py`).

Real-ESRGAN's x2 and x1 networks are its x4 one behind a pixel unshuffle (the input folded
into 12 or 48 channels at a half or a quarter of the side): the shape says which."""

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional

RESIDUAL_SCALE = 0.2  # each dense block and each RRDB adds its output scaled by this
SLOPE = 0.2  # the leaky ReLU's negative slope throughout


@dataclass(frozen=True)
class RRDBShape:
    """What a set of weights says about its network; `scale` is the output's side over the
    input's."""

    in_channels: int
    out_channels: int
    features: int
    growth: int
    blocks: int
    upsamples: int  # 2x nearest-neighbour stages, each followed by a 3x3 convolution

    @property
    def unshuffle(self) -> int:
        """1, or the pixel unshuffle's factor (2 or 4) when the input is folded into channels."""
        return math.isqrt(self.in_channels // self.out_channels)

    @property
    def scale(self) -> int:
        return 2**self.upsamples // self.unshuffle

    @property
    def receptive_radius(self) -> int:
        """How far (input pixels) an output pixel sees: each 3x3 convolution reaches one pixel
        at its own resolution. Tiles with at least this margin give the one-pass result."""
        low = 2 + 5 * 3 * self.blocks  # conv_first, five per dense block, three per RRDB, conv_body
        reach = low * self.unshuffle
        for stage in range(1, self.upsamples + 1):
            reach += self.unshuffle / 2**stage  # conv_up<stage> at its resolution
        reach += 2 * self.unshuffle / 2**self.upsamples  # conv_hr and conv_last
        return math.ceil(reach) + 1  # and the nearest-neighbour rounding


class DenseBlock(nn.Module):
    """Five convolutions, each seeing the block's input and every output before it. The
    outputs are written into one buffer rather than concatenated anew at each step: for a
    batch of one, the first k channels of a contiguous NCHW tensor are contiguous, so each
    convolution reads a prefix of the buffer without a copy."""

    def __init__(self, features: int, growth: int) -> None:
        super().__init__()
        self.features, self.growth = features, growth
        for index in range(1, 5):
            self.add_module(
                f"conv{index}", nn.Conv2d(features + (index - 1) * growth, growth, 3, 1, 1)
            )
        self.conv5 = nn.Conv2d(features + 4 * growth, features, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, _, height, width = x.shape
        grown = torch.empty(batch, self.features + 4 * self.growth, height, width, dtype=x.dtype)
        grown[:, : self.features] = x
        end = self.features
        for index in range(1, 5):
            conv: nn.Conv2d = getattr(self, f"conv{index}")
            grown[:, end : end + self.growth] = functional.leaky_relu(conv(grown[:, :end]), SLOPE)
            end += self.growth
        return self.conv5(grown).mul_(RESIDUAL_SCALE).add_(x)


class RRDB(nn.Module):
    """Three dense blocks inside a scaled residual connection."""

    def __init__(self, features: int, growth: int) -> None:
        super().__init__()
        self.rdb1 = DenseBlock(features, growth)
        self.rdb2 = DenseBlock(features, growth)
        self.rdb3 = DenseBlock(features, growth)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rdb3(self.rdb2(self.rdb1(x))).mul_(RESIDUAL_SCALE).add_(x)


class RRDBNet(nn.Module):
    """Input and output are NCHW floats in [0, 1]; the input's sides must be multiples of
    `shape.unshuffle` (tiles.py pads them)."""

    def __init__(self, shape: RRDBShape) -> None:
        super().__init__()
        self.shape = shape
        features = shape.features
        self.conv_first = nn.Conv2d(shape.in_channels, features, 3, 1, 1)
        self.body = nn.Sequential(*(RRDB(features, shape.growth) for _ in range(shape.blocks)))
        self.conv_body = nn.Conv2d(features, features, 3, 1, 1)
        for stage in range(1, shape.upsamples + 1):
            self.add_module(f"conv_up{stage}", nn.Conv2d(features, features, 3, 1, 1))
        self.conv_hr = nn.Conv2d(features, features, 3, 1, 1)
        self.conv_last = nn.Conv2d(features, shape.out_channels, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.shape.unshuffle > 1:
            x = functional.pixel_unshuffle(x, self.shape.unshuffle)
        feat = self.conv_first(x)
        feat = feat + self.conv_body(self.body(feat))
        for stage in range(1, self.shape.upsamples + 1):
            conv: nn.Conv2d = getattr(self, f"conv_up{stage}")
            feat = functional.interpolate(feat, scale_factor=2, mode="nearest")
            feat = functional.leaky_relu(conv(feat), SLOPE, inplace=True)
        return self.conv_last(functional.leaky_relu(self.conv_hr(feat), SLOPE, inplace=True))
