"""load(..., optimize=False) switches every optimisation off, and changes no result.

Each network of the benchmark suite is exported once (small inputs where the network
allows) and run optimised (graph passes, batch-parallel workers) and unoptimised.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kuiperinfer
from kuiperinfer.errors import UnknownOperatorError
from kuiperinfer.models import efficientnet_lite0_path
from networks import mobilenet_v3_small, resnet18, unet, yolov5s
from oracle import export

NETWORKS = {
    "resnet18": (resnet18, (3, 64, 64)),
    "mobilenetv3": (mobilenet_v3_small, (3, 64, 64)),
    "yolov5s": (yolov5s, (3, 64, 64)),
    "unet": (lambda: unet(bilinear=False, base=16), (3, 32, 32)),
    "unet_bilinear": (lambda: unet(bilinear=True, base=16), (3, 32, 32)),
}


def run_both(param, x: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    fast = kuiperinfer.load(param, workers=2)
    plain = kuiperinfer.load(param, optimize=False)
    assert plain.workers == 1
    return fast.run(x), plain.run(x)


def assert_agree(fast: list[np.ndarray], plain: list[np.ndarray]) -> None:
    assert len(fast) == len(plain)
    for a, b in zip(fast, plain):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("name", NETWORKS)
def test_optimised_and_plain_agree(tmp_path, name):
    build, shape = NETWORKS[name]
    param = export(build(), (torch.rand(1, *shape),), tmp_path)
    batch = 1 if name == "yolov5s" else 3   # yolov5's Detect views with the exported batch
    x = np.random.default_rng(0).standard_normal((batch, *shape), dtype=np.float32)
    assert_agree(*run_both(param, x))


def test_bundled_efficientnet_lite0_agrees():
    try:
        kuiperinfer.load(efficientnet_lite0_path(), optimize=False)
    except UnknownOperatorError as exc:
        pytest.skip(f"the bundled model is not supported yet: {exc}")
    x = np.random.default_rng(1).random((2, 3, 224, 224), dtype=np.float32)
    assert_agree(*run_both(efficientnet_lite0_path(), x))


def test_optimize_false_keeps_every_operator(tmp_path):
    param = export(resnet18(), (torch.rand(1, 3, 32, 32),), tmp_path)
    plain = kuiperinfer.load(param, optimize=False)
    assert len(plain.operators) == len(plain.pnnx_graph.ops)
    assert len(kuiperinfer.load(param).operators) < len(plain.operators)   # ReLUs fused
