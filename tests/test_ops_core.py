"""The first operators against PyTorch, each exported by pnnx, over a spread of parameters."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from networks import randomize_batchnorm
from oracle import check_op


@pytest.mark.parametrize("fn", [nn.ReLU(), F.relu, torch.relu, lambda x: x.relu(),
                                nn.Sigmoid(), torch.sigmoid, F.sigmoid, lambda x: x.sigmoid()])
def test_relu_sigmoid_spellings(fn, tmp_path):
    check_op(fn, (2, 3, 5, 4), directory=tmp_path, batch=3)


def test_sigmoid_extremes_do_not_overflow(tmp_path):
    check_op(lambda x: torch.sigmoid(x * 200), (1, 64), directory=tmp_path)


CONV_CASES = [
    dict(cin=3, cout=8, k=3, stride=1, padding=1),
    dict(cin=4, cout=6, k=(3, 5), stride=(2, 1), padding=(1, 2), bias=False),
    dict(cin=4, cout=4, k=3, stride=1, padding=2, dilation=2),
    dict(cin=8, cout=8, k=3, stride=2, padding=1, groups=8),           # depthwise
    dict(cin=4, cout=8, k=3, stride=1, padding=1, groups=4),           # depth multiplier 2
    dict(cin=6, cout=9, k=1, stride=1, padding=0, groups=3),
    dict(cin=3, cout=5, k=4, stride=1, padding="same"),                # even kernel: asymmetric
    dict(cin=3, cout=5, k=3, stride=1, padding="same", dilation=2),
    dict(cin=3, cout=5, k=3, stride=1, padding="valid"),
    dict(cin=3, cout=4, k=3, stride=1, padding=1, padding_mode="reflect"),
    dict(cin=3, cout=4, k=3, stride=2, padding=2, padding_mode="replicate"),
    dict(cin=3, cout=4, k=3, stride=1, padding=(1, 2), padding_mode="circular"),
    dict(cin=8, cout=8, k=5, stride=1, padding=2, groups=8, padding_mode="reflect"),
    dict(cin=16, cout=32, k=7, stride=2, padding=3, bias=False),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_conv2d(case, tmp_path):
    case = dict(case)
    cin, cout, k = case.pop("cin"), case.pop("cout"), case.pop("k")
    torch.manual_seed(0)
    check_op(nn.Conv2d(cin, cout, k, **case), (1, cin, 13, 11), directory=tmp_path, batch=2)


def test_functional_conv2d_with_weight_input(tmp_path):
    check_op(lambda x, w: F.conv2d(x, w, stride=2, padding=1), (1, 4, 9, 9), (6, 4, 3, 3),
             directory=tmp_path)


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


@pytest.mark.parametrize("size", [1, (1, 1), 3, (2, 5), (4, 3), (7, 7), (None, 2)])
def test_adaptive_avg_pool2d(size, tmp_path):
    check_op(nn.AdaptiveAvgPool2d(size), (1, 3, 14, 10), directory=tmp_path, batch=2)


def test_functional_adaptive_avg_pool2d(tmp_path):
    check_op(lambda x: F.adaptive_avg_pool2d(x, (3, 3)), (1, 4, 8, 7), directory=tmp_path)


@pytest.mark.parametrize("shape", [(1, 16), (1, 5, 16), (1, 2, 3, 16)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_any_leading_dims(shape, bias, tmp_path):
    torch.manual_seed(0)
    check_op(nn.Linear(16, 7, bias=bias), shape, directory=tmp_path, batch=3)


@pytest.mark.parametrize("start,end", [(0, -1), (1, -1), (1, 2), (2, 3)])
def test_flatten(start, end, tmp_path):
    check_op(lambda x: torch.flatten(x, start, end) + 1, (1, 2, 3, 4), directory=tmp_path, batch=2)


class FlattenLinear(nn.Module):
    # Named children: pnnx's generated Python cannot name an attribute "1" (nn.Sequential).
    def __init__(self):
        super().__init__()
        self.flatten, self.fc = nn.Flatten(), nn.Linear(24, 3)

    def forward(self, x):
        return self.fc(self.flatten(x))


def test_nn_flatten(tmp_path):
    check_op(FlattenLinear(), (1, 2, 3, 4), directory=tmp_path, batch=3)


@pytest.mark.parametrize("fn", [lambda x: x.view(1, 6, 4) * 2, lambda x: x.reshape(-1, 2, 12) * 2,
                                lambda x: x.view(x.size(0), -1) * 2, lambda x: torch.reshape(x, (1, 24)) * 2])
def test_view_reshape(fn, tmp_path):
    check_op(fn, (1, 2, 3, 4), directory=tmp_path)


def test_reshape_follows_batch(tmp_path):
    check_op(lambda x: x.view(x.size(0), 6, 4) * 2, (1, 2, 3, 4), directory=tmp_path, batch=5)


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_cat(dim, tmp_path):
    check_op(lambda a, b: torch.cat((a, b, a), dim), (2, 3, 4), (2, 3, 4), directory=tmp_path)


def test_cat_same_operand_twice(tmp_path):
    check_op(lambda a: torch.cat([a, a], 1), (1, 3, 4), directory=tmp_path, batch=2)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax(dim, tmp_path):
    check_op(nn.Softmax(dim), (2, 5, 7), directory=tmp_path)
    check_op(lambda x: F.softmax(x * 10, dim=dim), (3, 4, 6), directory=tmp_path)


def test_batchnorm2d_left_unfused(tmp_path):
    bn = randomize_batchnorm(nn.BatchNorm2d(5), seed=3)
    graph = check_op(bn, (1, 5, 6, 7), directory=tmp_path, batch=4)
    assert "nn.BatchNorm2d" in [op.type for op in graph.operators]


@pytest.mark.parametrize("sections,dim", [(2, 1), ([1, 3, 2], 1), (4, -1), ([5, 1], 2)])
def test_split(sections, dim, tmp_path):
    check_op(lambda x: tuple(t * 2 for t in torch.split(x, sections, dim)), (1, 6, 6), directory=tmp_path,
             batch=2)


@pytest.mark.parametrize("chunks,dim", [(2, 1), (3, 1), (4, 2), (3, 2)])
def test_chunk(chunks, dim, tmp_path):
    check_op(lambda x: tuple(t + 1 for t in torch.chunk(x, chunks, dim)), (1, 6, 7), directory=tmp_path)


def test_split_pieces_feed_different_consumers(tmp_path):
    def fn(x):
        a, b = torch.split(x, [2, 4], dim=1)
        return torch.cat([F.relu(b), torch.sigmoid(a)], 1)
    check_op(fn, (1, 6, 5), directory=tmp_path, batch=3)
