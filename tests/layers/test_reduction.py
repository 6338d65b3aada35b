"""Reductions against PyTorch, each exported by pnnx, over dims, keepdim and a batch change."""

import pytest
import torch
from oracle import check_op

DIMS = [1, -1, (1, 2), (0, 2), (-2, -1)]


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", DIMS, ids=str)
def test_sum_mean_amax_amin(dim, keepdim, tmp_path):
    check_op(lambda x: (torch.sum(x, dim, keepdim), torch.mean(x, dim, keepdim), torch.amax(x, dim, keepdim),
                        torch.amin(x, dim, keepdim), torch.logsumexp(x, dim, keepdim)),
             (1, 3, 4), directory=tmp_path, batch=2)


def test_reduce_everything(tmp_path):
    # 0-dim outputs; pnnx writes no dim at all, or dim=None
    check_op(lambda x: (x.mean(), x.sum(), x.amax(), torch.max(x), torch.min(x), torch.norm(x),
                        torch.argmax(x), torch.argmin(x), torch.amin(x, keepdim=True)),
             (1, 3, 4), directory=tmp_path, batch=2)


@pytest.mark.parametrize("dim", [1, -1])
def test_prod(dim, tmp_path):
    check_op(lambda x: (torch.prod(x, dim), torch.prod(x, dim, keepdim=True)), (1, 3, 4), directory=tmp_path)


def test_reduction_dtypes(tmp_path):
    # sums of bools and integers are int64; pnnx drops dtype= but records the f64 output
    check_op(lambda x: (torch.sum(x > 0, 1), torch.sum((x * 4).long(), (1, 2)), torch.mean(x, 1, dtype=torch.float64),
                        torch.sum(x, -1, dtype=torch.float64), torch.cumsum(x > 0, 1), torch.amax((x * 4).int(), 1)),
             (1, 3, 4), directory=tmp_path, batch=2)


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_max_min_with_indices(dim, keepdim, tmp_path):
    check_op(lambda x: (torch.max(x, dim, keepdim), x.min(dim, keepdim=keepdim), torch.max(x, dim)[0] * 2,
                        torch.argmax(x, dim, keepdim), torch.argmin(x, dim, keepdim)),
             (1, 3, 4), directory=tmp_path, batch=2)


def test_max_indices_alone_and_ties(tmp_path):
    # rounding makes ties; the first maximum wins
    check_op(lambda x: (torch.max(torch.round(x), 1)[1], torch.argmax(torch.round(x), -1),
                        torch.min(torch.round(x), 2)[1] + 1),
             (1, 5, 6), directory=tmp_path, batch=2)


@pytest.mark.parametrize("k,dim,largest", [(2, -1, True), (2, 1, False), (1, 2, True), (4, -1, False)])
def test_topk(k, dim, largest, tmp_path):
    check_op(lambda x: torch.topk(x, k, dim, largest=largest), (1, 3, 4), directory=tmp_path, batch=2)


def test_topk_nan_is_largest(tmp_path):
    # one NaN a row: PyTorch orders several NaNs (like other ties) unpredictably
    def fn(x):
        x = x.masked_fill(x == x.amin(-1, keepdim=True), float("nan"))
        return torch.topk(x, 3), torch.topk(x, 2, largest=False)
    check_op(fn, (1, 4, 8), directory=tmp_path, batch=2)


def test_topk_unsorted(tmp_path):
    # the order of sorted=False results is unspecified: compare order-free summaries
    def fn(x):
        values, indices = torch.topk(x, 3, dim=-1, sorted=False)
        return values.sum(-1), (indices * indices).sum(-1), values.amax(-1)
    check_op(fn, (1, 3, 5), directory=tmp_path, batch=2)


@pytest.mark.parametrize("dim", [1, -1, (1, 2)], ids=str)
def test_std_var(dim, tmp_path):
    check_op(lambda x: (torch.std(x, dim), torch.std(x, dim, keepdim=True, unbiased=False), x.var(dim),
                        torch.var(x, dim, correction=0), x.std(dim=dim, correction=2)),
             (1, 4, 5), directory=tmp_path, batch=2)


def test_norm(tmp_path):
    check_op(lambda x: (torch.norm(x, dim=1), x.norm(p=1, dim=-1, keepdim=True), torch.norm(x, p=float("inf"), dim=1),
                        torch.norm(x, p=float("-inf"), dim=2), torch.norm(x, p="fro", dim=(1, 2)),
                        torch.linalg.vector_norm(x, ord=3, dim=(1,)), torch.norm(x, 0, 1), x.norm(2.5, 1),
                        torch.linalg.vector_norm(x, dim=(1, 2), keepdim=True)),
             (1, 3, 4), directory=tmp_path, batch=2)


def test_logsumexp_is_stable(tmp_path):
    check_op(lambda x: (torch.logsumexp(x * 1000, 1), torch.logsumexp(x - 1e4, -1, keepdim=True),
                        torch.logsumexp(x.masked_fill(x < 10, float("-inf")), 2)),
             (1, 3, 4), directory=tmp_path)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cumsum_cumprod(dim, tmp_path):
    check_op(lambda x: (torch.cumsum(x, dim), x.cumsum(dim) * 2, torch.cumprod(x, dim)), (1, 3, 4),
             directory=tmp_path, batch=2)


def test_mean_of_large_input_is_accurate(tmp_path):
    check_op(lambda x: (x + 100).mean((1, 2)), (1, 64, 4096), directory=tmp_path, batch=2)
