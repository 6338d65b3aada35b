"""Comparisons, logic, NaN/inf tests and clamp against PyTorch.

Outputs are bool masks (compared exactly) or clamped values.
"""

import numpy as np
import torch
from oracle import Lambda, assert_matches, check_op, export, torch_outputs

import kuiperinfer


def op_types(graph):
    return {op.type for op in graph.operators}


def test_comparisons_tensor_and_scalar(tmp_path):
    graph = check_op(lambda x, y: (torch.eq(x, y), x == 0.5, torch.ne(x, 1), x != y, torch.gt(x, y), x > 1,
                                   x >= y, torch.ge(x, 0), x < y, x.lt(0.5), x <= y, torch.le(x, -1), 0.5 < x),
                     (1, 3, 4), (1, 3, 4), directory=tmp_path, batch=2)
    assert {"torch.eq", "torch.ne", "torch.gt", "torch.ge", "torch.lt", "torch.le"} <= op_types(graph)


def test_comparisons_broadcast_and_integers(tmp_path):
    def fn(x, y):
        rounded = (x * 3).long()
        return x > y[:, :1], x == y[0, 0, 0], rounded == 1, rounded <= (y * 3).long(), x.eq(torch.round(x))
    check_op(fn, (1, 3, 4), (1, 3, 4), directory=tmp_path, batch=2)


def test_equal_values_compare_equal(tmp_path):
    check_op(lambda x: (torch.round(x) == 0, torch.round(x) >= 0, torch.round(x) != 1), (1, 4, 5),
             directory=tmp_path)


def test_logical_operators(tmp_path):
    graph = check_op(lambda x, y: (torch.logical_and(x > 0, y > 0), torch.logical_or(x > 0, y),
                                   torch.logical_not(x > 0), torch.logical_xor(x, y > 0), ~(x > 0),
                                   x.logical_not(), (x > 0) & (y > 0), (x > 0) | (y < 0), (x > 0) ^ (y > 0)),
                     (1, 3, 4), (1, 3, 4), directory=tmp_path, batch=2)
    assert {"torch.logical_and", "torch.logical_or", "torch.logical_not", "torch.logical_xor",
            "torch.bitwise_not"} <= op_types(graph)


def test_isnan_isinf_isfinite(tmp_path):
    module = Lambda(lambda x: (torch.isnan(x), torch.isinf(x), torch.isfinite(x), torch.isposinf(x),
                               torch.isneginf(x), x.isnan().logical_not()))
    x = torch.tensor([[0.0, float("nan"), float("inf"), -float("inf"), 1.5, -2.0]])
    graph = kuiperinfer.load(export(module, [x], tmp_path))
    assert {"aten::isnan", "aten::isinf", "aten::isfinite"} <= op_types(graph)
    for case in (x, torch.cat([x.flip(1), x], 0)):
        outputs = graph.run(case.numpy())
        assert all(o.dtype == np.bool_ for o in outputs)
        assert_matches(outputs, torch_outputs(module, [case]))


def test_clamp(tmp_path):
    graph = check_op(lambda x: (torch.clamp(x, -0.5, 0.5), torch.clamp(x, min=0), x.clamp(max=1), torch.clip(x, 0.1, 0.2),
                                x.clip(-1), torch.clamp(x, min=float("-inf"), max=0.5), torch.clamp(x, 1, -1),
                                torch.clamp((x * 4).long(), -2, 2), torch.clamp((x * 4).long(), min=0.5)),
                     (1, 3, 4), directory=tmp_path, batch=2)
    assert "torch.clamp" in op_types(graph)


def test_clamp_with_tensor_bounds(tmp_path):
    check_op(lambda x, lo: torch.clamp(x, lo, lo + 1), (1, 3, 4), (1, 3, 4), directory=tmp_path, batch=2)
    check_op(lambda x, hi: torch.clamp(x, max=hi[:, :1]), (1, 3, 4), (1, 3, 4), directory=tmp_path)


def test_clamp_keeps_nan(tmp_path):
    check_op(lambda x: torch.clamp(x.masked_fill(x > 1, float("nan")), -0.5, 0.5), (1, 4, 6), directory=tmp_path)
