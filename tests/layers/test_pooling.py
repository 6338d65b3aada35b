"""Pooling against PyTorch, each exported by pnnx: max, average, adaptive average and
adaptive max pooling, 1-D and 2-D, module and functional spellings."""

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from handmade import make_operator
from oracle import check_op, export

import kuiperinfer
from kuiperinfer.errors import InferError, LayerCreateError
from kuiperinfer.layers import LayerRegisterer


def case_id(case: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in case.items())


POOL_CASES = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, ceil_mode=True),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1), ceil_mode=True),
    dict(kernel_size=3, stride=1, padding=1, dilation=2),
    dict(kernel_size=2, stride=3, dilation=2, ceil_mode=True),
]


@pytest.mark.parametrize("case", POOL_CASES, ids=str)
def test_max_pool2d(case, tmp_path):
    check_op(nn.MaxPool2d(**case), (1, 3, 11, 10), directory=tmp_path, batch=2)
    check_op(lambda x: F.max_pool2d(x, **case), (1, 2, 9, 12), directory=tmp_path)


MAX_POOL1D_CASES = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=2, stride=2, padding=1, ceil_mode=True),   # the last window would start in the padding
    dict(kernel_size=3, stride=2, ceil_mode=True),
    dict(kernel_size=3, stride=1, padding=1, dilation=3),
    dict(kernel_size=2, stride=3, dilation=2, ceil_mode=True),
]


@pytest.mark.parametrize("case", MAX_POOL1D_CASES, ids=case_id)
def test_max_pool1d(case, tmp_path):
    check_op(nn.MaxPool1d(**case), (1, 3, 11), directory=tmp_path, batch=2)


def test_functional_max_pool1d_default_stride(tmp_path):
    check_op(lambda x: F.max_pool1d(x, 3), (2, 4, 10), directory=tmp_path)


@pytest.mark.parametrize("case", [dict(kernel_size=2, stride=2, padding=1, ceil_mode=True),
                                  dict(kernel_size=(2, 3), stride=(2, 3), padding=(1, 1), ceil_mode=True),
                                  dict(kernel_size=3, stride=3, padding=1, ceil_mode=True)], ids=case_id)
def test_max_pool2d_ceil_mode_edges(case, tmp_path):
    # 5 + 1 padding: ceil_mode would add a window that starts in the padding; PyTorch drops it.
    check_op(nn.MaxPool2d(**case), (1, 2, 5, 7), directory=tmp_path, batch=3)


def test_max_pool_with_indices_is_refused(tmp_path):
    param = export(nn.MaxPool2d(2, return_indices=True), [torch.randn(1, 2, 6, 6)], tmp_path)
    with pytest.raises(LayerCreateError, match="return_indices"):
        kuiperinfer.load(param)


AVG_POOL2D_CASES = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=2, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, divisor_override=2),
    dict(kernel_size=4, stride=3, ceil_mode=True, divisor_override=5),
]


@pytest.mark.parametrize("case", AVG_POOL2D_CASES, ids=case_id)
def test_avg_pool2d(case, tmp_path):
    check_op(nn.AvgPool2d(**case), (1, 3, 9, 8), directory=tmp_path, batch=2)


@pytest.mark.parametrize("case", [dict(kernel_size=3), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
                                  dict(kernel_size=2, stride=2, padding=1, ceil_mode=True,
                                       count_include_pad=False)], ids=case_id)
def test_avg_pool1d(case, tmp_path):
    check_op(nn.AvgPool1d(**case), (1, 3, 11), directory=tmp_path, batch=2)


def test_functional_avg_pools(tmp_path):
    check_op(lambda x: F.avg_pool2d(x, 3, padding=1, count_include_pad=False), (1, 2, 7, 7), directory=tmp_path)
    check_op(lambda x: F.avg_pool1d(x, 2, ceil_mode=True), (1, 2, 7), directory=tmp_path)


@pytest.mark.parametrize("size", [1, (1, 1), 3, (2, 5), (4, 3), (7, 7), (None, 2)])
def test_adaptive_avg_pool2d(size, tmp_path):
    check_op(nn.AdaptiveAvgPool2d(size), (1, 3, 14, 10), directory=tmp_path, batch=2)


def test_functional_adaptive_avg_pool2d(tmp_path):
    check_op(lambda x: F.adaptive_avg_pool2d(x, (3, 3)), (1, 4, 8, 7), directory=tmp_path)


ADAPTIVE_2D = {"avg": F.adaptive_avg_pool2d, "max": F.adaptive_max_pool2d}
ADAPTIVE_1D = {"avg": F.adaptive_avg_pool1d, "max": F.adaptive_max_pool1d}


@pytest.mark.parametrize("kind", list(ADAPTIVE_2D))
def test_adaptive_pool2d(kind, tmp_path):
    # 7 x 9 input: sizes that divide it, that don't, and larger ones (overlapping windows); one export
    sizes = [1, (2, 3), (5, 4), (7, 9), (None, 3), (4, None), 13]
    pool = ADAPTIVE_2D[kind]
    check_op(lambda x: tuple(pool(x, size) for size in sizes), (1, 3, 7, 9), directory=tmp_path, batch=2)


@pytest.mark.parametrize("kind", list(ADAPTIVE_1D))
def test_adaptive_pool1d(kind, tmp_path):
    pool = ADAPTIVE_1D[kind]
    check_op(lambda x: tuple(pool(x, size) for size in [1, 3, 4, 11]), (1, 3, 7), directory=tmp_path, batch=2)


@pytest.mark.parametrize("module", [nn.AdaptiveAvgPool2d((None, 3)), nn.AdaptiveMaxPool2d(3),
                                    nn.AdaptiveAvgPool1d(2), nn.AdaptiveMaxPool1d(5)], ids=repr)
def test_adaptive_pool_modules(module, tmp_path):
    shape = (1, 3, 7) if "1d" in type(module).__name__ else (1, 3, 7, 9)
    check_op(module, shape, directory=tmp_path, batch=2)


def test_adaptive_max_pool_indices(tmp_path):
    check_op(lambda x: F.adaptive_max_pool2d(x, (3, 4), return_indices=True), (1, 3, 8, 7),
             directory=tmp_path, batch=2)
    check_op(lambda x: F.adaptive_max_pool1d(x, 3, return_indices=True), (1, 3, 8), directory=tmp_path)


def test_adaptive_max_pool_ties_report_the_first_index(tmp_path):
    # rounding makes many equal values; PyTorch reports the first maximum in row-major order
    check_op(lambda x: F.adaptive_max_pool2d(torch.round(x), 2, return_indices=True), (1, 2, 6, 5),
             directory=tmp_path)


@pytest.mark.parametrize("type_name,params,message", [
    ("F.avg_pool2d", dict(kernel_size=(3, 3), padding=(2, 2)), "half the kernel"),
    ("F.avg_pool2d", dict(kernel_size=(3, 3), divisor_override=0), "divisor_override"),
    ("F.max_pool1d", dict(kernel_size=(3,), stride=(0,)), "must be positive"),
    ("F.max_pool2d", dict(kernel_size=(3, 3, 3)), "expected 2"),
    ("F.adaptive_avg_pool2d", dict(output_size=(2, 2, 2)), "must be 2 sizes"),
    ("F.adaptive_max_pool1d", dict(), "missing parameter 'output_size'"),
], ids=lambda v: str(v))
def test_bad_parameters_raise_layer_create_error(type_name, params, message):
    shape = [1, 2, 9] if type_name.endswith("1d") else [1, 2, 9, 9]
    with pytest.raises(LayerCreateError, match=message):
        LayerRegisterer.create_layer(make_operator(type_name, [shape], **params))


def test_input_smaller_than_the_window_raises_infer_error():
    layer = LayerRegisterer.create_layer(make_operator("F.max_pool2d", [[1, 1, 2, 2]], kernel_size=(3, 3)))
    with pytest.raises(InferError, match="too small"):
        layer.forward([np.zeros((1, 1, 2, 2), dtype=np.float32)])
