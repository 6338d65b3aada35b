"""Differential checks of batching: what a graph computes must not depend on how its batch
is cut (one thread or several), on whether samples ran together or alone, or on which
requests the server joined.

``assert_same_at_every_batch`` loads a model once with one thread and once per thread count,
runs each at several batch sizes on samples that differ, and compares; where the graph's
samples are independent it also compares the batch with each sample run alone.
``assert_joined_requests_match`` sends requests at once through the server's batcher and
compares each answer with the request run alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from oracle import assert_matches

import kuiperinfer
from kuiperinfer.errors import KuiperError
from kuiperinfer.pnnx.dtypes import numpy_dtype
from kuiperinfer.runtime.graph import RuntimeGraph

BATCHES = (1, 3, 8)
THREADS = (2, 4)
TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}
"""Chunks of a batch run smaller products than the whole batch, whose sums BLAS may order
differently: equal within float32 rounding, not to the bit."""


def random_inputs(graph: RuntimeGraph, batch: int, seed: int = 0, high: int = 2) -> list[np.ndarray]:
    """Inputs of the graph's declared shapes at ``batch`` (open sizes as 1), different in every
    sample: normal floats, integers in [0, high)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for operand in graph.graph_input_operands():
        shape = [batch, *(max(1, d) for d in operand.shapes[1:])] if operand.shapes else []
        dtype = np.dtype(numpy_dtype(operand.type) or np.float32)
        if dtype.kind == "f":
            arrays.append(rng.standard_normal(shape).astype(dtype))
        elif dtype.kind == "b":
            arrays.append(rng.integers(0, 2, shape).astype(bool))
        else:
            arrays.append(rng.integers(0, high, shape).astype(dtype))
    return arrays


def _outcome(graph: RuntimeGraph, inputs: Sequence[np.ndarray]) -> list[np.ndarray] | KuiperError:
    try:
        with np.errstate(all="ignore"):
            return graph.run(*inputs)
    except KuiperError as error:
        return error


def assert_equal_outputs(got: list[np.ndarray] | KuiperError, expected: list[np.ndarray] | KuiperError,
                         what: str) -> None:
    """The same outputs (NaN equal to NaN), or both runs refused."""
    if isinstance(expected, KuiperError) or isinstance(got, KuiperError):
        assert isinstance(got, KuiperError) and isinstance(expected, KuiperError), \
            f"{what}: {got!r} where one thread gave {expected!r}"
        return
    assert len(got) == len(expected), what
    for i, (a, b) in enumerate(zip(got, expected)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype, f"{what}: output {i} {a.shape} {a.dtype}, expected " \
                                                          f"{b.shape} {b.dtype}"
        if a.dtype.kind in "fc":
            np.testing.assert_allclose(a, b, equal_nan=True, err_msg=f"{what}: output {i}", **TOLERANCE)
        else:
            np.testing.assert_array_equal(a, b, err_msg=f"{what}: output {i}")


def assert_same_at_every_batch(param: Path, make_inputs: Callable[[RuntimeGraph, int], list[np.ndarray]] = random_inputs,
                               batches: Sequence[int] = BATCHES, threads: Sequence[int] = THREADS,
                               expected: Callable[[list[np.ndarray]], list[np.ndarray]] | None = None,
                               **load_options) -> RuntimeGraph:
    """At every batch size, every thread count's run equals the one-thread run (or both
    fail); a batch-independent graph's batch equals its samples run alone; with
    ``expected`` (PyTorch), the one-thread run matches it too. Returns the one-thread graph."""
    reference = kuiperinfer.load(param, threads=1, **load_options)
    graphs = {count: kuiperinfer.load(param, threads=count, **load_options) for count in threads}
    for graph in graphs.values():
        assert graph.batching == reference.batching
    for batch in batches:
        inputs = make_inputs(reference, batch)
        one_worker = _outcome(reference, inputs)
        if expected is not None and not isinstance(one_worker, KuiperError):
            assert_matches(one_worker, expected(inputs))
        for count, graph in graphs.items():
            assert_equal_outputs(_outcome(graph, inputs), one_worker, f"{param.name}, batch {batch}, {count} threads")
        if reference.batching.independent and reference.batching.batch is None and batch > 1 \
                and not isinstance(one_worker, KuiperError):
            alone = [_outcome(reference, [x[i:i + 1] for x in inputs]) for i in range(batch)]
            if not any(isinstance(a, KuiperError) for a in alone):
                joined = [np.concatenate(parts) for parts in zip(*alone)]
                assert_equal_outputs(one_worker, joined, f"{param.name}, batch {batch} against its samples alone")
    return reference


def assert_joined_requests_match(graph: RuntimeGraph, requests: Sequence[Sequence[np.ndarray]]) -> int:
    """Send ``requests`` at once through the server's batcher; each answer must be what the
    request gives alone. Returns how many runs the batcher made."""
    from kuiperinfer.serve.batcher import Batcher
    from kuiperinfer.serve.model import ServedModel, describe

    model = ServedModel("model", graph, *describe(graph), Path("model.pnnx.param"))

    async def send() -> tuple[list, int]:
        batcher = Batcher(model, max_batch_size=8, window=0.05)
        batcher.start()
        try:
            answers = await asyncio.gather(*(batcher.infer(tuple(r)) for r in requests), return_exceptions=True)
        finally:
            await batcher.stop()
        return answers, batcher.executions

    answers, executions = asyncio.run(send())
    for i, (request, answer) in enumerate(zip(requests, answers)):
        if isinstance(answer, BaseException) and not isinstance(answer, KuiperError):
            raise answer
        assert_equal_outputs(answer, _outcome(graph, request), f"request {i} joined by the batcher")
    return executions
