"""Indexing against PyTorch, each exported by pnnx: slices and selects (alone, fused over
several dimensions, with bounds computed at run time), where and masked_fill."""

import numpy as np
import torch
from oracle import check_dynamic, check_op

import kuiperinfer


def test_slice(tmp_path):
    check_op(lambda x: (x[:, 1:3], x[:, :, ::2], x[:, -2:], x[..., 1:5:2], x[:, 1:100], x[:, -100:2],
                        x[:, 3:1], x[:, :-1]),
             (1, 4, 6, 7), directory=tmp_path, batch=2)


def test_fused_multi_dim_slice(tmp_path):
    graph = check_op(lambda x: (x[:, :-1, 1:], x[:, 1:3, 2:4, ::3], x[..., 1:, ::2], x[:, :, -3:-1, 1:6:2]),
                     (1, 4, 6, 7), directory=tmp_path, batch=2)
    assert any(op.has_param("dims") for op in graph.operators)


def test_slice_with_negative_step(tmp_path):
    # PyTorch rejects negative steps, but pnnx's slice allows them (ONNX Slice does):
    # write one into a real export by hand; INT_MIN as end means "past the beginning".
    check_op(lambda x: x[:, 1:3] * 2, (1, 4, 5), directory=tmp_path)
    param = tmp_path / "model.pnnx.param"
    param.write_text(param.read_text().replace("end=3 start=1 step=1", "end=-2147483648 start=-2 step=-2"))
    x = np.random.default_rng(0).standard_normal((2, 4, 5), dtype=np.float32)
    (ours,) = kuiperinfer.load(param).run(x)
    np.testing.assert_array_equal(ours, x[:, -2::-2] * 2)


def test_select(tmp_path):
    check_op(lambda x: (x[:, 1], x[:, -1], x.select(2, 0), torch.select(x, 1, 2), x[..., 0], x[:, :, -2]),
             (1, 4, 6, 7), directory=tmp_path, batch=2)


def test_fused_slice_and_select(tmp_path):
    # dims index the input: x[:, 0, :, -2] is dims=(1,3) selects=(0,-2)
    check_op(lambda x: (x[:, 0, :, -2], x[:, 1:3, 0], x[0, :, 2:], x[:, 0, 0], x[:, 2, 1:, -1],
                        x[..., 1:3, 2], x[:, :, -3:-1, 0]),
             (1, 4, 6, 7), directory=tmp_path, batch=2)


def test_slice_and_select_bounds_from_inputs(tmp_path):
    def fn(x):
        return (x[:, : x.size(1) // 2] * 2, x[:, :, x.size(2) // 3:] * 2, x[:, x.size(1) - 1] * 2)
    graph = check_dynamic(fn, [torch.randn(1, 4, 6)], [torch.randn(2, 6, 9)], tmp_path)
    assert any("end" in op.input_names for op in graph.operators)


def test_where(tmp_path):
    check_op(lambda x, y: (torch.where(x > 0, x, y), torch.where(x > 0, x, 0.5), torch.where(x > y, 2.0, y),
                           torch.where(x > 0, 1.0, 0.0), torch.where(x > 0, 1, 0), torch.where(x > 0, x, y[:, :1]),
                           torch.where(y[:, :1] > 0, x, float("-inf"))),
             (1, 3, 4), (1, 3, 4), directory=tmp_path, batch=2)


def test_masked_fill(tmp_path):
    check_op(lambda x, y: (x.masked_fill(x > 0, 0.0), x.masked_fill(y > 0.5, float("-inf")),
                           torch.masked_fill(x, x < 0, 2), x.masked_fill(y[:, :1] > 0, -1.5),
                           x.masked_fill(x > 1, float("nan")), (x * 4).long().masked_fill(y > 0, 7)),
             (1, 3, 4), (1, 3, 4), directory=tmp_path, batch=2)
