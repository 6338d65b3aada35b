"""Matrix products and einsum against PyTorch, each exported by pnnx."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from oracle import check_model, check_op

from kuiperinfer.layers.linalg import restore_ellipsis

MATMUL_SHAPES = [
    ((3, 4), (4, 5)),
    ((3, 4), (4,)),                   # matrix @ vector
    ((4,), (4, 5)),                   # vector @ matrix
    ((2, 3, 4), (4,)),
    ((4,), (2, 4, 5)),
    ((2, 3, 4), (4, 5)),
    ((3, 4), (2, 4, 5)),
    ((2, 3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (5, 4, 6)),        # broadcast batch dimensions
    ((1, 2, 3, 4), (2, 1, 4, 6)),
]


@pytest.mark.parametrize("a,b", MATMUL_SHAPES, ids=str)
def test_matmul_ranks_and_broadcasting(a, b, tmp_path):
    check_op(torch.matmul, a, b, directory=tmp_path)


def test_vector_dot_vector_is_0_d(tmp_path):
    check_op(lambda a, b: torch.matmul(a, b) * 2, (4,), (4,), directory=tmp_path)


@pytest.mark.parametrize("fn", [lambda a, b: a @ b, lambda a, b: a.matmul(b), torch.bmm,
                                lambda a, b: a.bmm(b), torch.linalg.matmul])
def test_batched_spellings(fn, tmp_path):
    check_op(fn, (1, 3, 4), (1, 4, 6), directory=tmp_path, batch=3)


@pytest.mark.parametrize("fn", [torch.mm, lambda a, b: a.mm(b)])
def test_mm(fn, tmp_path):
    check_op(fn, (3, 4), (4, 6), directory=tmp_path)


def test_mv(tmp_path):
    check_op(torch.mv, (3, 4), (4,), directory=tmp_path)


def test_matmul_with_a_weight(tmp_path):
    class Project(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(8, 5))

        def forward(self, x):
            return torch.matmul(x, self.w)
    check_op(Project(), (1, 7, 8), directory=tmp_path, batch=2)


@pytest.mark.parametrize("alpha,beta", [(1, 1), (2.0, 0.5), (-1.5, 0.0), (0.25, 3)])
def test_addmm(alpha, beta, tmp_path):
    check_op(lambda c, a, b: torch.addmm(c, a, b, beta=beta, alpha=alpha), (3, 6), (3, 4), (4, 6),
             directory=tmp_path)


@pytest.mark.parametrize("bias_shape", [(6,), (1, 6), (3, 1)])
def test_addmm_broadcast_input(bias_shape, tmp_path):
    check_op(lambda c, a, b: c.addmm(a, b, alpha=0.5), bias_shape, (3, 4), (4, 6), directory=tmp_path)


def test_addmm_beta_zero_ignores_nan_input(tmp_path):
    check_op(lambda c, a, b: torch.addmm(c / 0 * 0, a, b, beta=0), (3, 6), (3, 4), (4, 6), directory=tmp_path)


@pytest.mark.parametrize("alpha,beta,bias_shape", [(1, 1, (2, 3, 6)), (2.0, 0.5, (2, 3, 6)), (1, 1, (6,))])
def test_baddbmm(alpha, beta, bias_shape, tmp_path):
    check_op(lambda c, a, b: torch.baddbmm(c, a, b, beta=beta, alpha=alpha), bias_shape, (2, 3, 4), (2, 4, 6),
             directory=tmp_path)


EINSUMS = [
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
    ("bhqk,bhkd->bhqd", [(1, 2, 3, 5), (1, 2, 5, 4)]),
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(1, 3, 4), (1, 4, 5)]),
    ("b i d, b j d -> b i j", [(1, 3, 4), (1, 5, 4)]),
    ("ij,jk", [(3, 4), (4, 5)]),                        # implicit output
    ("bij,bjk", [(2, 3, 4), (2, 4, 5)]),                # implicit output drops the summed b
    ("i,j->ij", [(3,), (4,)]),
    ("i,j", [(3,), (4,)]),
    ("bi,bi->b", [(1, 5), (1, 5)]),
    ("ij,kj->ik", [(3, 4), (5, 4)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,...jk", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,jk->...ik", [(2, 2, 3, 4), (4, 5)]),
    ("ij...,jk...->ik...", [(3, 4, 2), (4, 5, 2)]),
    ("b...d,bd->b...", [(2, 3, 5, 4), (2, 4)]),
    ("...d,...d->...", [(2, 3, 4), (2, 3, 4)]),
    ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 5)]),
]


@pytest.mark.parametrize("equation,shapes", EINSUMS, ids=[e for e, _ in EINSUMS])
def test_einsum(equation, shapes, tmp_path):
    check_op(lambda *xs: torch.einsum(equation, *xs), *shapes, directory=tmp_path)


@pytest.mark.parametrize("equation,shape", [("ii->i", (4, 4)), ("ij->ji", (3, 5)), ("zyx->xzy", (2, 3, 4)),
                                            ("ij->", (2, 3)), ("...ii->...i", (2, 3, 3)),
                                            ("...ij->...ji", (2, 3, 4)), ("ii", (3, 3))])
def test_einsum_one_operand(equation, shape, tmp_path):
    check_op(lambda x: torch.einsum(equation, x) + 1, shape, directory=tmp_path)


def test_einsum_follows_batch(tmp_path):
    check_op(lambda a, b: torch.einsum("bhqd,bhkd->bhqk", a, b), (1, 2, 3, 4), (1, 2, 5, 4),
             directory=tmp_path, batch=3)
    check_op(lambda a, b: torch.einsum("...ij,...jk->...ik", a, b), (1, 3, 4), (1, 4, 5),
             directory=tmp_path, batch=4)


@pytest.mark.parametrize("equation,shapes,output,expected", [
    ("ik,kj->ij", [(2, 3, 4), (2, 4, 5)], (2, 3, 5), "...ik,...kj->...ij"),
    ("ik,kj->ij", [(3, 4, 2), (4, 5, 2)], (3, 5, 2), "ik...,kj...->ij..."),
    ("ij,ij->i", [(2, 3, 5, 4), (2, 4)], (2, 3, 5), "i...j,ij->i..."),
    ("ijkl,ijml->ijkm", [(1, 2, 3, 4), (1, 2, 5, 4)], (1, 2, 3, 5), "ijkl,ijml->ijkm"),
    ("ik,kj->ij", [(2, 3, 4), (2, 4, 5)], (2, 3, 6), None),
])
def test_restore_ellipsis(equation, shapes, output, expected):
    assert restore_ellipsis(equation, shapes, output) == expected


PAIRWISE_CASES = [dict(), dict(p=1.0), dict(p=3.0, eps=1e-5, keepdim=True), dict(p=0.5), dict(p=float("inf")),
                  dict(p=float("-inf"), keepdim=True), dict(p=0.0), dict(eps=0.0)]


@pytest.mark.parametrize("case", PAIRWISE_CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_pairwise_distance(case, tmp_path):
    class Distance(nn.Module):
        def forward(self, x1, x2):
            return F.pairwise_distance(x1, x2, **case), F.pairwise_distance(x1[:, :1], x2, **case)

    torch.manual_seed(0)
    x1, x2 = torch.randn(1, 5, 6), torch.randn(1, 5, 6)
    x1[0, 0, 0] = x2[0, 0, 0]   # one equal element: p=0 counts it out (up to eps)
    graph = check_model(Distance(), [x1, x2], tmp_path, [[torch.randn(3, 5, 6), torch.randn(3, 5, 6)]])
    assert "F.pairwise_distance" in {op.type for op in graph.operators}


def test_pairwise_distance_of_vectors(tmp_path):
    check_op(lambda a, b: F.pairwise_distance(a, b), (4, 7), (4, 7), directory=tmp_path, batch=2)
    check_op(lambda a, b: F.pairwise_distance(a, b, keepdim=True), (7,), (7,), directory=tmp_path)
