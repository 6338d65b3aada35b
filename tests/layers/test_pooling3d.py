"""3-D pooling against PyTorch, each exported by pnnx: max (with indices), average,
adaptive average and adaptive max (with indices), module and functional spellings,
batched and unbatched."""

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from handmade import make_operator
from oracle import check_model, check_op

from kuiperinfer.errors import InferError, LayerCreateError
from kuiperinfer.layers import LayerRegisterer


def case_id(case: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in case.items())


def written_types(graph) -> set[str]:
    return {op.type for op in graph.operators}


MAX_POOL3D_CASES = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(3, 2, 3), stride=(2, 1, 2), padding=(1, 0, 1)),
    dict(kernel_size=3, stride=2, ceil_mode=True),
    dict(kernel_size=2, stride=2, padding=1, ceil_mode=True),   # a last window would start in the padding
    dict(kernel_size=3, stride=1, padding=1, dilation=2),
    dict(kernel_size=2, stride=3, dilation=(1, 2, 2), ceil_mode=True),
]


@pytest.mark.parametrize("return_indices", [False, True])
@pytest.mark.parametrize("case", MAX_POOL3D_CASES, ids=case_id)
def test_max_pool3d(case, return_indices, tmp_path):
    graph = check_op(nn.MaxPool3d(**case, return_indices=return_indices), (1, 3, 6, 7, 8), directory=tmp_path,
                     batch=2)
    assert "nn.MaxPool3d" in written_types(graph)


def test_functional_max_pool3d(tmp_path):
    graph = check_op(lambda x: (F.max_pool3d(x, 2), F.max_pool3d(x, 3, 2, 1, return_indices=True)),
                     (1, 2, 5, 6, 7), directory=tmp_path, batch=3)
    assert "F.max_pool3d" in written_types(graph)


def test_max_pool3d_ties_report_the_first_index(tmp_path):
    check_op(lambda x: F.max_pool3d(torch.round(x), 2, return_indices=True), (1, 2, 4, 4, 4), directory=tmp_path)


AVG_POOL3D_CASES = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=(3, 2, 2), stride=(2, 1, 3), padding=(1, 0, 1), ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, divisor_override=5),
    dict(kernel_size=2, stride=2, ceil_mode=True, divisor_override=3),
]


@pytest.mark.parametrize("case", AVG_POOL3D_CASES, ids=case_id)
def test_avg_pool3d(case, tmp_path):
    graph = check_op(nn.AvgPool3d(**case), (1, 3, 6, 7, 8), directory=tmp_path, batch=2)
    assert "nn.AvgPool3d" in written_types(graph)


def test_functional_avg_pool3d(tmp_path):
    graph = check_op(lambda x: (F.avg_pool3d(x, 2), F.avg_pool3d(x, 3, 1, 1, count_include_pad=False)),
                     (1, 2, 5, 6, 7), directory=tmp_path, batch=2)
    assert "F.avg_pool3d" in written_types(graph)


ADAPTIVE_SIZES = [1, (2, 3, 4), (3, None, 2), (5, 7, 9), 11]   # dividing, not dividing, kept, larger


@pytest.mark.parametrize("size", ADAPTIVE_SIZES, ids=str)
def test_adaptive_avg_pool3d(size, tmp_path):
    graph = check_op(nn.AdaptiveAvgPool3d(size), (1, 3, 5, 7, 9), directory=tmp_path, batch=2)
    assert "nn.AdaptiveAvgPool3d" in written_types(graph)


@pytest.mark.parametrize("return_indices", [False, True])
@pytest.mark.parametrize("size", ADAPTIVE_SIZES, ids=str)
def test_adaptive_max_pool3d(size, return_indices, tmp_path):
    # the module asked for indices: pnnx writes one tuple output and a prim::TupleUnpack
    graph = check_op(nn.AdaptiveMaxPool3d(size, return_indices=return_indices), (1, 3, 5, 7, 9),
                     directory=tmp_path, batch=2)
    assert "nn.AdaptiveMaxPool3d" in written_types(graph)


def test_functional_adaptive_pool3d(tmp_path):
    graph = check_op(lambda x: (F.adaptive_avg_pool3d(x, (2, 3, 1)), F.adaptive_max_pool3d(x, 2),
                                F.adaptive_max_pool3d(x, (3, 2, 4), return_indices=True)),
                     (1, 2, 5, 6, 7), directory=tmp_path, batch=2)
    assert {"F.adaptive_avg_pool3d", "F.adaptive_max_pool3d"} <= written_types(graph)


@pytest.mark.parametrize("module", [nn.MaxPool3d(2, return_indices=True), nn.AvgPool3d(3, 2, 1),
                                    nn.AdaptiveAvgPool3d(2), nn.AdaptiveMaxPool3d((2, 3, 2))], ids=repr)
def test_unbatched_pool3d(module, tmp_path):
    check_model(nn.Sequential(module), [torch.randn(3, 5, 6, 7)], tmp_path)


@pytest.mark.parametrize("type_name,params,message", [
    ("F.max_pool3d", dict(kernel_size=(3, 3)), "expected 3"),
    ("F.max_pool3d", dict(kernel_size=(3, 3, 3), padding=(2, 2, 2)), "half the kernel"),
    ("F.max_pool3d", dict(kernel_size=(3, 3, 3), stride=(0, 1, 1)), "must be positive"),
    ("F.avg_pool3d", dict(kernel_size=(3, 3, 3), divisor_override=0), "divisor_override"),
    ("F.avg_pool3d", dict(kernel_size=(3, 3, 3), dilation=(2, 2, 2)), "no dilation"),
    ("F.adaptive_avg_pool3d", dict(output_size=(2, 2)), "must be 3 sizes"),
    ("F.adaptive_max_pool3d", dict(), "missing parameter 'output_size'"),
], ids=lambda v: str(v))
def test_bad_parameters_raise_layer_create_error(type_name, params, message):
    with pytest.raises(LayerCreateError, match=message):
        LayerRegisterer.create_layer(make_operator(type_name, [[1, 2, 5, 5, 5]], **params))


def test_wrong_inputs_raise_infer_error():
    layer = LayerRegisterer.create_layer(make_operator("F.max_pool3d", [[1, 1, 5, 5, 5]], kernel_size=(3, 3, 3)))
    with pytest.raises(InferError, match="too small"):
        layer.forward([np.zeros((1, 1, 2, 5, 5), np.float32)])
    with pytest.raises(InferError, match="unbatched"):
        layer.forward([np.zeros((5, 5), np.float32)])
