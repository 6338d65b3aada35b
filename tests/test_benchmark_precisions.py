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
