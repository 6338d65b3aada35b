"""End to end: MobileNetV3-Small, YOLOv5s and UNet, written by hand in tests/networks.py,
exported by pnnx once per module and run by kuiperinfer against PyTorch.

Every output must be within the oracle's tolerances (1e-4 absolute or 1e-3 relative).
"""

from collections import Counter

import pytest
import torch

import kuiperinfer
from networks import mobilenet_v3_small, unet, yolov5s
from oracle import assert_matches, check_model, export, torch_outputs


def images(batch: int, size: int | tuple[int, int], seed: int) -> torch.Tensor:
    height, width = (size, size) if isinstance(size, int) else size
    return torch.randn(batch, 3, height, width, generator=torch.Generator().manual_seed(seed))


def operator_types(graph: kuiperinfer.RuntimeGraph) -> Counter:
    return Counter(op.type for op in graph.operators)


# --------------------------------------------------------------------------- MobileNetV3-Small


@pytest.fixture(scope="module")
def mobilenet(tmp_path_factory):
    model = mobilenet_v3_small()
    param = export(model, (images(1, 224, 0),), tmp_path_factory.mktemp("mobilenet"), "mobilenet")
    return model, kuiperinfer.load(param)


@pytest.mark.parametrize("batch", [1, 2])
def test_mobilenet_v3_small_matches_pytorch(mobilenet, batch):
    model, graph = mobilenet
    x = images(batch, 224, batch)
    ours = graph.run(x.numpy())
    assert_matches(ours, torch_outputs(model, (x,)))
    assert ours[0].shape == (batch, 1000)


def test_mobilenet_v3_small_layers(mobilenet):
    _, graph = mobilenet
    types = operator_types(graph)
    depthwise = [op for op in graph.operators
                 if op.type == "nn.Conv2d" and op.param_int("groups") > 1]
    assert len(depthwise) == 11
    assert types["nn.Hardsigmoid"] == 9 and types["nn.AdaptiveAvgPool2d"] == 10
    assert types["nn.Hardswish"] > 0 and types["nn.Linear"] == 2
    assert "nn.BatchNorm2d" not in types and "nn.Dropout" not in types


# --------------------------------------------------------------------------- YOLOv5s


@pytest.fixture(scope="module")
def yolo(tmp_path_factory):
    model = yolov5s()
    param = export(model, (images(1, 640, 0),), tmp_path_factory.mktemp("yolov5s"), "yolov5s")
    return model, kuiperinfer.load(param)


def test_yolov5s_matches_pytorch(yolo):
    model, graph = yolo
    x = images(1, 640, 1)
    ours = graph.run(x.numpy())
    assert_matches(ours, torch_outputs(model, (x,)))
    assert ours[0].shape == (1, 25200, 85)


def test_yolov5s_layers(yolo):
    """SPPF's three max pools, two nearest upsamples, the decode's sigmoid/split and its
    grids, which pnnx folds into constants (pnnx.Attribute) at the exported size."""
    _, graph = yolo
    types = operator_types(graph)
    assert types["nn.MaxPool2d"] == 3 and types["nn.Upsample"] == 2
    assert types["F.sigmoid"] == 3 and types["torch.split"] == 3
    assert types["pnnx.Attribute"] == 6
    assert "nn.BatchNorm2d" not in types


# --------------------------------------------------------------------------- UNet


@pytest.fixture(scope="module", params=[False, True], ids=["transposed", "bilinear"])
def unet256(request, tmp_path_factory):
    bilinear = request.param
    model = unet(bilinear)
    param = export(model, (images(1, 256, 0),), tmp_path_factory.mktemp("unet"), "unet")
    return bilinear, model, kuiperinfer.load(param)


def test_unet_matches_pytorch(unet256):
    """Batch 1 for both up paths, and batch 2 for the ConvTranspose2d one."""
    bilinear, model, graph = unet256
    for batch in (1,) if bilinear else (1, 2):
        x = images(batch, 256, batch)
        ours = graph.run(x.numpy())
        assert_matches(ours, torch_outputs(model, (x,)))
        assert ours[0].shape == (batch, 2, 256, 256)
    assert operator_types(graph)["nn.Upsample" if bilinear else "nn.ConvTranspose2d"] == 4


@pytest.mark.parametrize("bilinear", [False, True], ids=["transposed", "bilinear"])
def test_unet_odd_size_pads_the_upsampled_map(bilinear, tmp_path):
    """57x75 halves to odd sizes (57 -> 28 -> 14 -> 7 -> 3, 75 -> 37 -> 18 -> 9 -> 4), so three
    of the four up steps come out one row and/or column short of their skip and F.pad adds it
    at the bottom/right; pnnx drops the fourth, all-zero pad."""
    model = unet(bilinear=bilinear, base=8)
    graph = check_model(model, (images(1, (57, 75), 0),), tmp_path, [(images(2, (57, 75), 1),)])
    pads = sorted(op.param_ints("pad") for op in graph.operators if op.type == "F.pad")
    assert pads == [(0, 1, 0, 0), (0, 1, 0, 1), (0, 1, 0, 1)]
