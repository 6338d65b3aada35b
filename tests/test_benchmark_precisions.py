"""The precisions' benchmark: the bytes a graph's layers hold, each array once, the model
file's views left out."""

import numpy as np
import torch
import torch.nn as nn
from oracle import export

import kuiperinfer
from benchmarks import precisions


def test_the_layers_hold_a_quarter_of_the_bytes_in_int8_and_half_in_bf16(tmp_path):
    model = nn.Sequential(nn.Conv2d(16, 32, 3), nn.ReLU(), nn.Flatten(), nn.Linear(32 * 6 * 6, 10))
    param = export(model.eval(), (torch.randn(1, 16, 8, 8),), tmp_path)
    np.save(tmp_path / "calibrate.npy", np.random.default_rng(0).standard_normal((4, 16, 8, 8)).astype(np.float32))
    table = kuiperinfer.quantize(param, tmp_path / "calibrate.npy").table
    held = {precision: precisions.held_bytes(kuiperinfer.load(param, precision=precision, warmup=False,
                                                              calibration=table if precision == "int8" else None))
            for precision in precisions.PRECISIONS}
    weights = 32 * 16 * 9 + 32 * 6 * 6 * 10
    assert held["fp32"] >= 4 * weights                    # the packed float32 operands
    assert 2 * weights <= held["bf16"] < 0.6 * held["fp32"]
    assert weights <= held["int8"] < 0.3 * held["fp32"]


def test_a_convolution_on_the_float32_tiles_holds_its_weight_once(tmp_path):
    """The tiles pack the weight their own way; the BLAS operand of im2col is let go."""
    from kuiperinfer.kernels.matrix.convolution import ProductConvolution

    model = nn.Sequential(nn.Conv2d(32, 64, 3, stride=2), nn.ReLU(), nn.Conv2d(64, 64, 1))   # no Winograd
    x = torch.randn(1, 32, 12, 12)
    param = export(model.eval(), (x,), tmp_path)
    graph = kuiperinfer.load(param)
    (out,) = graph.run(x.numpy())
    np.testing.assert_allclose(out, model(x).detach().numpy(), atol=1e-4)
    if not all(isinstance(op.layer.kernel, ProductConvolution) for op in graph.operators if hasattr(op.layer, "kernel")):
        return   # no float32 tiles on this machine: im2col's operand computes
    weights = (64 * 32 * 9 + 64 * 64) * 4
    assert weights <= precisions.held_bytes(graph) < 1.5 * weights
