"""The ESRGAN-family files people have load into one network whatever their layout, wrapper
or format, with the network's size and scale read from the weights; a file that is not one is
an error naming the file and what is wrong."""

from pathlib import Path

import pytest
import torch

from imagegen.model.upscalers.esrgan_files import UpscalerFileError, load_esrgan
from imagegen.model.upscalers.rrdbnet import RRDBShape
from tests.support.tiny_upscaler import X1, X2, X4, original_layout, tiny_net, write_weights

SHAPES = {"x4": X4, "x2": X2, "x1": X1}


def output(net: torch.nn.Module) -> torch.Tensor:
    pixels = torch.rand(1, 3, 16, 12, generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        return net(pixels)


@pytest.mark.parametrize("kind", SHAPES)
def test_every_layout_wrapper_and_format_loads_the_same_network(tmp_path: Path, kind: str):
    shape = SHAPES[kind]
    net = tiny_net(shape)
    state = net.state_dict()
    files = [
        write_weights(tmp_path / "basicsr.safetensors", state),
        write_weights(tmp_path / "basicsr.pth", state),
        write_weights(tmp_path / "ema.pth", {"params_ema": state}),
        write_weights(tmp_path / "params.pth", {"params": state}),
        write_weights(tmp_path / "original.pth", original_layout(state, shape)),
        write_weights(tmp_path / "original.safetensors", original_layout(state, shape)),
    ]
    expected = output(net)
    for path in files:
        loaded = load_esrgan(path)
        assert loaded.shape == shape, path.name
        assert torch.equal(output(loaded), expected), path.name
        assert all(p.dtype == torch.float32 for p in loaded.parameters())


@pytest.mark.parametrize(("kind", "scale", "unshuffle"), [("x4", 4, 1), ("x2", 2, 2), ("x1", 1, 4)])
def test_the_scale_is_read_from_the_weights(tmp_path: Path, kind: str, scale: int, unshuffle: int):
    path = write_weights(tmp_path / "renamed_8x.pth", tiny_net(SHAPES[kind]).state_dict())
    shape = load_esrgan(path).shape
    assert (shape.scale, shape.unshuffle) == (scale, unshuffle)
    assert output(load_esrgan(path)).shape[2:] == (16 * scale, 12 * scale)


def test_the_size_is_read_from_the_weights(tmp_path: Path):
    """Features, growth, depth and an 8x network's third upsampling stage (as ESRGAN's 8x
    files have), in the original layout too."""
    shape = RRDBShape(in_channels=3, out_channels=3, features=12, growth=6, blocks=3, upsamples=3)
    state = tiny_net(shape).state_dict()
    for path in (
        write_weights(tmp_path / "a.safetensors", state),
        write_weights(tmp_path / "b.pth", original_layout(state, shape)),
    ):
        loaded = load_esrgan(path).shape
        assert loaded == shape and loaded.scale == 8


def test_params_ema_is_preferred_to_params(tmp_path: Path):
    """Real-ESRGAN saves both; the EMA weights are the ones it runs."""
    ema, raw = tiny_net(X4, seed=1), tiny_net(X4, seed=2)
    path = write_weights(
        tmp_path / "both.pth", {"params": raw.state_dict(), "params_ema": ema.state_dict()}
    )
    assert torch.equal(output(load_esrgan(path)), output(ema))


def test_half_precision_weights_run_in_fp32(tmp_path: Path):
    state = {name: value.half() for name, value in tiny_net(X4).state_dict().items()}
    net = load_esrgan(write_weights(tmp_path / "fp16.safetensors", state))
    assert {p.dtype for p in net.parameters()} == {torch.float32}


def bad_files(tmp_path: Path) -> list[tuple[Path, str]]:
    state = tiny_net(X4).state_dict()
    misshapen = dict(state) | {"body.1.rdb2.conv3.weight": torch.zeros(4, 7, 3, 3)}
    missing = {k: v for k, v in state.items() if not k.startswith("body.1.rdb3.conv5")}
    plus = original_layout(state, X4) | {
        "model.1.sub.0.RDB1.conv1x1.weight": torch.zeros(4, 8, 1, 1)
    }
    compact = {"body.0.weight": torch.zeros(8, 3, 3, 3), "body.0.bias": torch.zeros(8)}
    grey = dict(state) | {
        "conv_last.weight": torch.zeros(1, 8, 3, 3),
        "conv_last.bias": torch.zeros(1),
    }
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    truncated = tmp_path / "truncated.pth"
    truncated.write_bytes(write_weights(tmp_path / "whole.pth", state).read_bytes()[:500])

    def file(name: str, state: object) -> Path:
        return write_weights(tmp_path / name, state)  # type: ignore[arg-type]

    return [
        (tmp_path / "model.ckpt", "must end in .safetensors or .pth"),
        (tmp_path / "absent.pth", "no such file"),
        (garbage, "not a readable .safetensors file"),
        (truncated, "not a readable .pth file"),
        (file("pickle.pth", {"net": torch.nn.Linear(2, 2)}), "holds a torch.nn.modules.linear"),
        (file("list.pth", [1, 2]), "holds a list, not a state dict"),
        (file("empty.pth", {"step": 3}), "holds no tensors"),
        (file("compact.pth", compact), "not an ESRGAN-family (RRDBNet) network"),
        (file("grey.pth", grey), "1 output channels: only RGB"),
        (file("misshapen.pth", misshapen), "size mismatch for body.1.rdb2.conv3"),
        (file("missing.pth", missing), "do not fit an RRDBNet: Missing key(s)"),
        (file("plus.pth", plus), "do not fit an RRDBNet: Unexpected key(s)"),
    ]  # fmt: skip


def test_a_file_that_is_not_an_upscaler_is_an_error_naming_the_file_and_the_fault(tmp_path: Path):
    for path, problem in bad_files(tmp_path):
        with pytest.raises(UpscalerFileError) as raised:
            load_esrgan(path)
        assert str(raised.value).startswith(f"upscaler file {path.name}: "), str(raised.value)
        assert problem in str(raised.value), (path.name, str(raised.value))
