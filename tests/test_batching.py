"""The batching analysis (kuiperinfer/runtime/batching.py): which graphs keep their samples
apart along dimension 0, which batch sizes they run, and the constants that carry the batch
pnnx traced. Each kind of graph it refuses to cut has a test here; every refused graph must
still give the one-thread results with several threads.

tests/test_batch_differential.py runs every test network at several batch sizes and thread
counts, and through the server's batcher.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from batches import assert_same_at_every_batch
from oracle import Holder, Lambda, export, torch_outputs

import kuiperinfer
from kuiperinfer.errors import InputError
from kuiperinfer.runtime.batching import Batch


def batching_of(fn_or_module, *shapes, tmp_path, batch2: int | None = None, integers: bool = False):
    """Export on random inputs of ``shapes`` (and, with ``batch2``, dynamic over the batch);
    the graph's batching, checked against the one-thread run and PyTorch at several batches."""
    module = fn_or_module if isinstance(fn_or_module, nn.Module) else Lambda(fn_or_module)
    make = (lambda s: torch.randint(0, 3, s)) if integers else (lambda s: torch.rand(*s))
    inputs = [make(s) for s in shapes]
    inputs2 = None if batch2 is None else [make((batch2, *s[1:])) for s in shapes]
    param = export(module, inputs, tmp_path, inputs2=inputs2)
    graph = kuiperinfer.load(param, threads=1)
    traced = shapes[0][0]
    batches = (1, 3, 8) if graph.batching.batch is None else (traced,)
    expected = lambda arrays: torch_outputs(module, [torch.from_numpy(a) for a in arrays])  # noqa: E731
    assert_same_at_every_batch(param, batches=batches, expected=expected)
    return graph.batching


# -- samples kept apart -------------------------------------------------------------------

def test_elementwise_graphs_keep_samples_apart(tmp_path):
    batching = batching_of(lambda x, y: torch.relu(x * y + 1) - torch.sigmoid(y), (2, 3, 4), (2, 3, 4),
                           tmp_path=tmp_path)
    assert batching.independent and batching.batch is None and not batching.carriers


def test_a_shape_computed_from_the_batch_size_keeps_samples_apart(tmp_path):
    # exported dynamic: pnnx keeps x.size(0) as size(@0,0) in the shape of a reshape and an expand
    token = torch.rand(1, 1, 4)
    batching = batching_of(lambda x: torch.cat((token.expand(x.size(0), -1, -1), x.reshape(x.size(0), -1, 4)), 1),
                           (2, 3, 8), tmp_path=tmp_path, batch2=3)
    assert batching.independent


def test_a_shared_weight_read_by_a_functional_layer_keeps_samples_apart(tmp_path):
    weight = torch.rand(5, 4)
    batching = batching_of(lambda x: F.linear(x, weight * 2), (2, 4), tmp_path=tmp_path)
    assert batching.independent


def test_an_expanded_token_follows_the_batch_of_each_call(tmp_path):
    # traced at batch 4, pnnx folds the expanded token into a (4,1,4) constant of equal rows
    token = torch.rand(1, 1, 4)
    batching = batching_of(lambda x: torch.cat((token.expand(x.shape[0], -1, -1), x), 1) * 2, (4, 3, 4),
                           tmp_path=tmp_path)
    assert batching.independent and batching.batch is None
    (carrier,) = batching.carriers
    assert carrier.equal_rows and carrier.shape == (4, 1, 4)


# -- graphs the analysis refuses to cut ----------------------------------------------------

@pytest.mark.parametrize("fn, reason", [
    (lambda x: x - x.mean(0, keepdim=True), "torch.mean"),
    (lambda x: torch.softmax(x, 0), "softmax"),
    (lambda x: torch.cat((x, x * 2), 0), "torch.cat"),
    (lambda x: x.transpose(0, 1) * 2, "transpose"),
    (lambda x: x.flatten(0, 1) + 1, "flatten"),
    (lambda x: x.sum() + x, "torch.sum"),
], ids=["mean over the batch", "softmax over the batch", "cat on the batch", "batch moved", "batch flattened",
        "reduced to a scalar"])
def test_an_operator_that_mixes_samples(tmp_path, fn, reason):
    batching = batching_of(fn, (2, 3, 4), tmp_path=tmp_path)
    assert not batching.independent and reason in batching.reason


@pytest.mark.parametrize("module, shape", [
    (nn.Conv2d(3, 4, 3), (3, 8, 8)), (nn.ConvTranspose1d(3, 4, 3, stride=2), (3, 8)),
    (nn.MaxPool2d(2), (3, 8, 8)), (nn.AdaptiveAvgPool1d(2), (3, 8)), (nn.InstanceNorm1d(3), (3, 8)),
], ids=["conv2d", "conv_transpose1d", "max_pool2d", "adaptive_avg_pool1d", "instance_norm1d"])
def test_an_unbatched_input_whose_dimension_0_is_the_channels(tmp_path, module, shape):
    batching = batching_of(nn.Sequential(module), shape, tmp_path=tmp_path)
    assert not batching.independent


def test_a_batched_value_read_whole_as_a_weight(tmp_path):
    batching = batching_of(lambda x, w: F.linear(x, w), (3, 4), (3, 4), tmp_path=tmp_path)
    assert not batching.independent and "whole" in batching.reason


def test_a_constant_with_more_dimensions_than_the_batch(tmp_path):
    # (B,3) + (2,1,3) is (2,B,3): the output's dimension 0 is not the batch
    constant = torch.rand(2, 1, 3)
    batching = batching_of(lambda x: x + constant, (1, 3), tmp_path=tmp_path)
    assert not batching.independent and "does not broadcast" in batching.reason


def test_arithmetic_on_the_batch_size(tmp_path):
    batching = batching_of(lambda x: x * x.size(0), (2, 3), tmp_path=tmp_path, batch2=3)
    assert not batching.independent


def test_an_output_the_same_for_every_sample(tmp_path):
    table = torch.rand(3, 5)
    batching = batching_of(lambda x: (x * 2, table.sum(0) + 1), (2, 5), tmp_path=tmp_path)
    assert not batching.independent and "TupleConstruct" in batching.reason


def test_inputs_traced_at_different_batch_sizes(tmp_path):
    batching = batching_of(lambda x, y: x * 2 + y.sum(), (2, 3), (5, 3), tmp_path=tmp_path)
    assert not batching.independent


def test_a_recurrent_layer_whose_batch_is_dimension_1(tmp_path):
    batching = batching_of(Holder(nn.GRU(4, 5)), (6, 2, 4), tmp_path=tmp_path)
    assert not batching.independent


# -- constants that fix the batch ----------------------------------------------------------

def test_chained_expressions_over_integer_constants_of_a_row_per_sample(tmp_path):
    # add, sub, mul, div, floor_divide, remainder of a float input of 12 rows with int constants of 12 rows
    a = torch.arange(12 * 15).reshape(12, 15) % 7 + 1
    b = torch.arange(12 * 15).reshape(12, 15) % 5 + 2

    def fn(x):
        return (((x + a) * b - a) / b) // 2 + (x * 10) % b

    batching = batching_of(fn, (12, 15), tmp_path=tmp_path)
    assert batching.independent and batching.batch == 12 and len({c.name for c in batching.carriers}) == 2
    graph = kuiperinfer.load(tmp_path / "model.pnnx.param")
    with pytest.raises(InputError, match=r"runs only at batch 12: operator '.*' \(pnnx.Expression\) reads the "
                                         r"constant '.*' of shape \(12,15\)"):
        graph.run(np.zeros((6, 15), np.float32))


def test_a_warm_up_never_fails_a_load(tmp_path):
    # the step of arange comes from the input's values: zeros give an empty step, real inputs run
    def fn(x):
        return torch.arange(0, 4, float(x.max()) + 0.5) * x.sum()

    module = Lambda(fn)
    x = torch.rand(2, 3) + 0.5
    param = export(module, [x], tmp_path)
    graph = kuiperinfer.load(param)
    np.testing.assert_allclose(graph(x.numpy()), fn(x).numpy(), rtol=1e-5)


# -- the analysis's pieces -----------------------------------------------------------------

@pytest.mark.parametrize("expr, inputs, role", [
    ("add(@0,@1)", [Batch.ROWS, Batch.SHARED], Batch.ROWS),
    ("[size(@0,0),-1,16]", [Batch.ROWS], Batch.SIZE),
    ("[size(@0,1),-1]", [Batch.ROWS], Batch.SHARED),
    ("[-1,size(@0,0)]", [Batch.ROWS], None),
    ("size(@0,-3)", [Batch.ROWS], Batch.SIZE),
    ("mul(@0,size(@0,0))", [Batch.ROWS], None),
    ("int(@0)", [Batch.ROWS], None),
    ("[@0,@1]", [Batch.ROWS, Batch.ROWS], Batch.ROWS),
    ("[@0,@1]", [Batch.ROWS, Batch.SHARED], None),
])
def test_expressions_say_what_they_make_of_the_batch(expr, inputs, role):
    from kuiperinfer.expression import compile_expression
    from kuiperinfer.layers.expression import ExpressionLayer

    layer = ExpressionLayer("e", compile_expression(expr), ranks=[3] * len(inputs))
    assert layer.batch_flow(inputs) is role
