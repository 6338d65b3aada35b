"""nn.Unfold / F.unfold and nn.Fold / F.fold against PyTorch, exported by pnnx: kernel,
dilation, padding and stride, batched and unbatched."""

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from handmade import make_operator
from oracle import check_model, check_op

from kuiperinfer.errors import InferError, LayerCreateError
from kuiperinfer.kernels.windows import sweep_output
from kuiperinfer.layers import LayerRegisterer


def case_id(case: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in case.items())


def written_types(graph) -> set[str]:
    return {op.type for op in graph.operators}


CASES = [
    dict(kernel_size=2),
    dict(kernel_size=(2, 3), stride=2),
    dict(kernel_size=3, padding=1),
    dict(kernel_size=(3, 2), dilation=(2, 1), padding=(2, 1), stride=(1, 2)),
    dict(kernel_size=2, stride=3),   # windows that leave gaps
]


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_unfold(case, tmp_path):
    graph = check_op(nn.Unfold(**case), (1, 3, 7, 8), directory=tmp_path, batch=2)
    assert "nn.Unfold" in written_types(graph)
    graph = check_op(lambda x: F.unfold(x, **case), (1, 2, 6, 9), directory=tmp_path, batch=3)
    assert "F.unfold" in written_types(graph)


def columns(case: dict, size: tuple[int, int], channels: int) -> tuple[int, int]:
    """(rows, columns) that fold into ``size`` with ``case``."""
    def pair(value):
        return value if isinstance(value, tuple) else (value, value)

    kernel, stride = pair(case["kernel_size"]), pair(case.get("stride", 1))
    dilation, padding = pair(case.get("dilation", 1)), pair(case.get("padding", 0))
    out = [sweep_output(s + 2 * p, k, st, d) for s, p, k, st, d in zip(size, padding, kernel, stride, dilation)]
    return channels * kernel[0] * kernel[1], out[0] * out[1]


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_fold(case, tmp_path):
    rows, length = columns(case, (7, 8), 3)
    graph = check_op(nn.Fold((7, 8), **case), (1, rows, length), directory=tmp_path, batch=2)
    assert "nn.Fold" in written_types(graph)
    graph = check_op(lambda x: F.fold(x, (7, 8), **case), (1, rows, length), directory=tmp_path, batch=3)
    assert "F.fold" in written_types(graph)


def test_fold_of_unfold_counts_overlaps(tmp_path):
    check_op(lambda x: F.fold(F.unfold(x, 3, padding=1), (6, 5), 3, padding=1), (1, 2, 6, 5), directory=tmp_path)


def test_unbatched_patches(tmp_path):
    check_model(nn.Sequential(nn.Unfold(2, stride=2)), [torch.randn(3, 6, 6)], tmp_path)
    check_model(nn.Sequential(nn.Fold((4, 5), 2)), [torch.randn(8, 12)], tmp_path)


@pytest.mark.parametrize("type_name,params,message", [
    ("F.unfold", dict(kernel_size=(0, 2)), "must be positive"),
    ("F.unfold", dict(kernel_size=(2, 2, 2)), "expected 2"),
    ("F.fold", dict(kernel_size=(2, 2)), "missing parameter 'output_size'"),
    ("F.fold", dict(kernel_size=(2, 2), output_size=(0, 3)), "output_size"),
])
def test_bad_parameters_raise_layer_create_error(type_name, params, message):
    with pytest.raises(LayerCreateError, match=message):
        LayerRegisterer.create_layer(make_operator(type_name, [[1, 4, 6]], **params))


def test_columns_that_do_not_fold_raise_infer_error():
    layer = LayerRegisterer.create_layer(make_operator("F.fold", [[1, 8, 12]], kernel_size=(2, 2),
                                                       output_size=(4, 5)))
    with pytest.raises(InferError, match="does not fold"):
        layer.forward([np.zeros((1, 8, 11), np.float32)])
    with pytest.raises(InferError, match="does not fold"):
        layer.forward([np.zeros((1, 7, 12), np.float32)])
