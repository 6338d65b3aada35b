"""End to end: MobileNetV3-Small, YOLOv5s and UNet, written by hand in benchmarks/networks.py,
exported by pnnx once per module and run by kuiperinfer against PyTorch.

Every output must be within the oracle's tolerances (1e-4 absolute or 1e-3 relative).
The graphs run as ``kuiperinfer.load`` builds them (optimised); the checks of the layers
read what pnnx wrote, the .pnnx.param, not the optimised graph.
"""

from collections import Counter
from pathlib import Path
from typing import NamedTuple

import pytest
import torch
from oracle import assert_matches, check_model, export, torch_outputs

import kuiperinfer
from benchmarks.networks import mobilenet_v3_small, unet, yolov5s
from kuiperinfer.pnnx import Operator, read_param


class Exported(NamedTuple):
    model: torch.nn.Module
    param: Path
    graph: kuiperinfer.RuntimeGraph

    @classmethod
    def of(cls, model: torch.nn.Module, size: int, directory: Path) -> "Exported":
        """Export ``model`` with pnnx on one image of ``size`` and load it."""
        param = export(model, (images(1, size, 0),), directory)
        return cls(model, param, kuiperinfer.load(param))

    def check(self, x: torch.Tensor) -> list:
        """Run ``x`` through kuiperinfer, compare with PyTorch; returns our outputs."""
        ours = self.graph.run(x.numpy())
        assert_matches(ours, torch_outputs(self.model, (x,)))
        return ours


def images(batch: int, size: int | tuple[int, int], seed: int) -> torch.Tensor:
    height, width = (size, size) if isinstance(size, int) else size
    return torch.randn(batch, 3, height, width, generator=torch.Generator().manual_seed(seed))


def pnnx_operators(param: str | Path) -> list[Operator]:
    """The operators as pnnx wrote them."""
    return read_param(param).ops


def pnnx_types(param: Path) -> Counter:
    return Counter(op.type for op in pnnx_operators(param))


# --------------------------------------------------------------------------- MobileNetV3-Small


@pytest.fixture(scope="module")
def mobilenet(tmp_path_factory):
    return Exported.of(mobilenet_v3_small(), 224, tmp_path_factory.mktemp("mobilenet"))


@pytest.mark.parametrize("batch", [1, 2])
def test_mobilenet_v3_small_matches_pytorch(mobilenet, batch):
    ours = mobilenet.check(images(batch, 224, batch))
    assert ours[0].shape == (batch, 1000)


def test_mobilenet_v3_small_layers(mobilenet):
    types = pnnx_types(mobilenet.param)
    depthwise = [op for op in pnnx_operators(mobilenet.param)
                 if op.type == "nn.Conv2d" and op.params["groups"].value > 1]
    assert len(depthwise) == 11
    assert types["nn.Hardsigmoid"] == 9 and types["nn.AdaptiveAvgPool2d"] == 10
    assert types["nn.Hardswish"] > 0 and types["nn.Linear"] == 2
    assert "nn.BatchNorm2d" not in types and "nn.Dropout" not in types


# --------------------------------------------------------------------------- YOLOv5s


@pytest.fixture(scope="module")
def yolo(tmp_path_factory):
    return Exported.of(yolov5s(), 640, tmp_path_factory.mktemp("yolov5s"))


def test_yolov5s_matches_pytorch(yolo):
    ours = yolo.check(images(1, 640, 1))
    assert ours[0].shape == (1, 25200, 85)


def test_yolov5s_layers(yolo):
    """SPPF's three max pools, two nearest upsamples, the decode's sigmoid/split and its
    grids, which pnnx folds into constants (pnnx.Attribute) at the exported size."""
    types = pnnx_types(yolo.param)
    assert types["nn.MaxPool2d"] == 3 and types["nn.Upsample"] == 2
    assert types["F.sigmoid"] == 3 and types["torch.split"] == 3
    assert types["pnnx.Attribute"] == 6
    assert "nn.BatchNorm2d" not in types


# --------------------------------------------------------------------------- UNet


@pytest.fixture(scope="module", params=[False, True], ids=["transposed", "bilinear"])
def unet256(request, tmp_path_factory):
    return Exported.of(unet(bilinear=request.param), 256, tmp_path_factory.mktemp("unet"))


def test_unet_matches_pytorch(unet256):
    """Batch 1 for both up paths, and batch 2 for the ConvTranspose2d one."""
    bilinear = unet256.model.bilinear
    for batch in (1,) if bilinear else (1, 2):
        ours = unet256.check(images(batch, 256, batch))
        assert ours[0].shape == (batch, 2, 256, 256)
    assert pnnx_types(unet256.param)["nn.Upsample" if bilinear else "nn.ConvTranspose2d"] == 4


@pytest.mark.parametrize("bilinear", [False, True], ids=["transposed", "bilinear"])
def test_unet_odd_size_pads_the_upsampled_map(bilinear, tmp_path):
    """57x75 halves to odd sizes (57 -> 28 -> 14 -> 7 -> 3, 75 -> 37 -> 18 -> 9 -> 4), so three
    of the four up steps come out one row and/or column short of their skip and F.pad adds it
    at the bottom/right; pnnx drops the fourth, all-zero pad."""
    model = unet(bilinear=bilinear, base=8)
    graph = check_model(model, (images(1, (57, 75), 0),), tmp_path, [(images(2, (57, 75), 1),)])
    pads = sorted(op.params["pad"].value for op in pnnx_operators(graph.param_path)
                  if op.type == "F.pad")
    assert pads == [[0, 1, 0, 0], [0, 1, 0, 1], [0, 1, 0, 1]]
