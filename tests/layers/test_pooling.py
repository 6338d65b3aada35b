"""Pooling against PyTorch, each exported by pnnx: max (with indices), average, adaptive
average, adaptive max (with indices) and power-average pooling, 1-D and 2-D, module and
functional spellings, batched and unbatched; max unpooling."""

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from handmade import make_operator
from oracle import check_model, check_op

from kuiperinfer.errors import InferError, LayerCreateError
from kuiperinfer.layers import LayerRegisterer
from kuiperinfer.runtime.parameter import RuntimeParameter, RuntimeParameterType


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


@pytest.mark.parametrize("case", POOL_CASES, ids=str)
def test_max_pool2d_with_indices(case, tmp_path):
    graph = check_op(nn.MaxPool2d(**case, return_indices=True), (1, 3, 11, 10), directory=tmp_path, batch=2)
    assert "nn.MaxPool2d" in {op.type for op in graph.operators}
    graph = check_op(lambda x: F.max_pool2d(x, **case, return_indices=True), (1, 2, 9, 12), directory=tmp_path)
    assert "F.max_pool2d" in {op.type for op in graph.operators}


@pytest.mark.parametrize("case", MAX_POOL1D_CASES, ids=case_id)
def test_max_pool1d_with_indices(case, tmp_path):
    graph = check_op(nn.MaxPool1d(**case, return_indices=True), (1, 3, 11), directory=tmp_path, batch=2)
    assert "nn.MaxPool1d" in {op.type for op in graph.operators}
    check_op(lambda x: F.max_pool1d(x, **case, return_indices=True), (1, 2, 12), directory=tmp_path)


def test_max_pool_indices_ties_report_the_first_index(tmp_path):
    check_op(lambda x: (F.max_pool2d(torch.round(x), 3, 1, 1, return_indices=True),
                        F.max_pool1d(torch.round(x[:, 0]), 3, 2, return_indices=True)), (1, 2, 6, 7),
             directory=tmp_path)


UNPOOL_CASES = [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2, stride=3)]


class Unpool(nn.Module):
    """Max pooling, then unpooling to the input's size (pnnx can only export unpooling given
    ``output_size``: without it, tracing fails in PyTorch 2.13 itself)."""

    def __init__(self, rank: int, size: list[int], **case):
        super().__init__()
        pools = {1: (nn.MaxPool1d, nn.MaxUnpool1d), 2: (nn.MaxPool2d, nn.MaxUnpool2d), 3: (nn.MaxPool3d, nn.MaxUnpool3d)}
        pool, unpool = pools[rank]
        self.pool, self.unpool, self.size = pool(**case, return_indices=True), unpool(**case), size

    def forward(self, x):
        values, indices = self.pool(x)
        return self.unpool(values, indices, output_size=self.size), indices


@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("case", UNPOOL_CASES, ids=case_id)
def test_max_unpool(rank, case, tmp_path):
    spatial = [9, 8, 7][:rank]
    graph = check_model(Unpool(rank, spatial, **case), [torch.randn(1, 3, *spatial)], tmp_path,
                        [[torch.randn(2, 3, *spatial)]])
    assert f"aten::max_unpool{max(rank, 2)}d" in {op.type for op in graph.operators}


def test_functional_max_unpool(tmp_path):
    def unpool(x):
        values, indices = F.max_pool2d(x, 2, return_indices=True)
        return F.max_unpool2d(values * 2, indices, 2, output_size=[7, 8])

    check_op(unpool, (1, 2, 7, 8), directory=tmp_path, batch=2)


def test_max_unpool_refuses_indices_outside_the_output():
    layer = LayerRegisterer.create_layer(make_operator("aten::max_unpool2d", [[1, 1, 2, 2], [1, 1, 2, 2], [2]]))
    values, indices = np.ones((1, 1, 2, 2), np.float32), np.array([[[[0, 1], [2, 99]]]])
    with pytest.raises(InferError, match="outside the output plane"):
        layer.forward([values, indices, [4, 4]])
    with pytest.raises(InferError, match="not 2 sizes"):
        layer.forward([values, indices, [4]])


LP_POOL_CASES = [
    dict(norm_type=2, kernel_size=2),
    dict(norm_type=1, kernel_size=3, stride=2),
    dict(norm_type=3.0, kernel_size=(2, 3), stride=(1, 2)),
    dict(norm_type=1.5, kernel_size=3, stride=2, ceil_mode=True),   # partial last windows
]


@pytest.mark.parametrize("case", LP_POOL_CASES, ids=case_id)
def test_lp_pool2d(case, tmp_path):
    # |x|: a fractional power of a negative number is NaN in both
    module = nn.LPPool2d(**case)
    graph = check_model(nn.Sequential(module), [torch.rand(1, 3, 8, 9)], tmp_path, [[torch.rand(2, 3, 8, 9)]])
    assert "nn.LPPool2d" in {op.type for op in graph.operators}
    graph = check_op(lambda x: F.lp_pool2d(x.abs(), **case), (1, 2, 7, 9), directory=tmp_path, batch=2)
    assert "F.lp_pool2d" in {op.type for op in graph.operators}


@pytest.mark.parametrize("case", [dict(norm_type=2, kernel_size=2), dict(norm_type=3, kernel_size=3, stride=1),
                                  dict(norm_type=1.5, kernel_size=3, stride=2, ceil_mode=True)], ids=case_id)
def test_lp_pool1d(case, tmp_path):
    graph = check_model(nn.Sequential(nn.LPPool1d(**case)), [torch.rand(1, 3, 10)], tmp_path,
                        [[torch.rand(3, 3, 10)]])
    assert "nn.LPPool1d" in {op.type for op in graph.operators}
    graph = check_op(lambda x: F.lp_pool1d(x, **case), (1, 2, 11), directory=tmp_path, batch=2)
    assert "F.lp_pool1d" in {op.type for op in graph.operators}


def test_lp_pool_of_odd_power_keeps_negative_sums(tmp_path):
    check_op(lambda x: F.lp_pool2d(x, 3, 2), (1, 2, 6, 6), directory=tmp_path)


@pytest.mark.parametrize("norm_type", [np.inf, -np.inf])
def test_lp_pool_of_infinite_norm_is_the_max_or_min_of_magnitudes(norm_type):
    # pnnx writes F.lp_pool2d(x, inf) as abs and max pooling, and fails on nn.LPPool2d(inf): by hand
    op = make_operator("nn.LPPool2d", [[1, 2, 4, 4]], kernel_size=(2, 2))
    op.params["norm_type"] = RuntimeParameter(RuntimeParameterType.kParameterFloat, norm_type, str(norm_type))
    layer = LayerRegisterer.create_layer(op)
    x = torch.randn(1, 2, 4, 4)
    expected = F.lp_pool2d(x, norm_type, 2).numpy()
    np.testing.assert_allclose(layer.forward([x.numpy()])[0], expected)


@pytest.mark.parametrize("module,shape", [
    (nn.MaxPool2d(2), (3, 8, 8)), (nn.MaxPool2d(3, 2, 1, return_indices=True), (3, 7, 8)),
    (nn.MaxPool1d(2, return_indices=True), (3, 9)), (nn.AvgPool2d(3, 2, 1), (2, 7, 7)), (nn.AvgPool1d(2), (2, 9)),
    (nn.AdaptiveAvgPool2d(2), (3, 5, 6)), (nn.AdaptiveMaxPool2d(2, return_indices=True), (3, 5, 6)),
    (nn.AdaptiveMaxPool1d(3), (3, 8)), (nn.LPPool2d(2, 2), (3, 6, 6)),
], ids=lambda v: repr(v))
def test_unbatched_pooling(module, shape, tmp_path):
    check_model(nn.Sequential(module), [torch.rand(*shape)], tmp_path)


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


@pytest.mark.parametrize("module", [nn.AdaptiveMaxPool2d((3, 4), return_indices=True),
                                    nn.AdaptiveMaxPool2d((None, 2), return_indices=True),
                                    nn.AdaptiveMaxPool1d(3, return_indices=True)], ids=repr)
def test_adaptive_max_pool_module_with_indices(module, tmp_path):
    # pnnx writes one output holding (values, indices) and a prim::TupleUnpack after it
    shape = (1, 3, 8) if "1d" in type(module).__name__ else (1, 3, 8, 7)
    graph = check_op(module, shape, directory=tmp_path, batch=2)
    assert "prim::TupleUnpack" in {op.type for op in graph.operators}


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
