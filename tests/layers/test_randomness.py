"""Random operators, each exported by pnnx: torch.randn, randn_like, normal (and rand_like,
randint_like and normal of tensors, which pnnx writes as aten operators).

NumPy's generator cannot reproduce PyTorch's numbers, so these tests compare what can be:
shapes and dtypes with PyTorch, the distribution (mean and spread over many values), and
that a seed makes runs reproducible while successive calls draw new values.
"""

import numpy as np
import pytest
import torch
from oracle import Lambda, export, torch_outputs

import kuiperinfer


def op_types(graph):
    return {op.type for op in graph.operators}


def random_model(tmp_path):
    """Sizes read from the input, so that pnnx does not fold the draws into constants."""
    def fn(x):
        return (torch.randn(x.size(0), 400, 50) * 2 + 1,              # torch.randn, $size
                torch.randn_like(x),                                   # torch.randn_like
                x.clone().normal_(3.0, 0.5),                           # torch.normal with $input
                torch.normal(x * 0 + 2.0, 4.0),                        # aten::normal of tensors
                torch.rand_like(x),                                    # aten::rand_like
                torch.randint_like(x, 2, 9),                           # aten::randint_like
                torch.randint_like(x, 4),                              # aten::randint_like, high only
                torch.randn(x.size(0), 3, dtype=torch.float64))        # dtype
    model = Lambda(fn)
    param = export(model, [torch.randn(1, 200, 100)], tmp_path, inputs2=[torch.randn(2, 200, 100)])
    return model, param


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return random_model(tmp_path_factory.mktemp("random"))


def test_pnnx_writes_the_random_types(exported):
    _, param = exported
    graph = kuiperinfer.load(param)
    assert {"torch.randn", "torch.randn_like", "torch.normal", "aten::normal", "aten::rand_like",
            "aten::randint_like"} <= op_types(graph)


@pytest.mark.parametrize("batch", [1, 3])
def test_shapes_dtypes_and_distributions(exported, batch):
    model, param = exported
    x = torch.randn(batch, 200, 100)
    ours = kuiperinfer.load(param).run(x.numpy())
    expected = torch_outputs(model, [x])
    assert [(a.shape, a.dtype) for a in ours] == [(b.shape, b.dtype) for b in expected]
    randn, randn_like, normal_, normal, rand_like, randint_like, randint_high, double = ours
    for values, mean, std in ((randn, 1, 2), (randn_like, 0, 1), (normal_, 3, 0.5), (normal, 2, 4)):
        assert abs(values.mean() - mean) < 0.05 * std and abs(values.std() - std) < 0.05 * std
    assert 0 <= rand_like.min() and rand_like.max() < 1 and abs(rand_like.mean() - 0.5) < 0.01
    assert set(np.unique(randint_like)) == set(range(2, 9)) and set(np.unique(randint_high)) == set(range(4))
    assert double.dtype == np.float64


def test_a_seed_makes_runs_reproducible(exported):
    _, param = exported
    x = np.zeros((2, 200, 100), np.float32)
    first, again, other = (kuiperinfer.load(param, seed=seed) for seed in (7, 7, 8))
    a1, a2, b1 = first.run(x), again.run(x), other.run(x)
    for u, v, w in zip(a1, a2, b1):
        np.testing.assert_array_equal(u, v)
        assert not np.array_equal(u, w)
    # successive calls draw new values, in the same sequence for the same seed
    second = first.run(x)
    assert not np.array_equal(second[0], a1[0])
    for u, v in zip(second, again.run(x)):
        np.testing.assert_array_equal(u, v)
    # each operator has a generator of its own: randn_like and normal_ do not repeat each other
    assert not np.allclose(a1[1], (a1[2] - 3) * 2)
