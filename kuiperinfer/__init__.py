"""kuiperinfer: a small, readable inference engine for PNNX models, running on NumPy.

>>> import kuiperinfer
>>> graph = kuiperinfer.load("resnet18.pnnx.param")   # finds resnet18.pnnx.bin beside it
>>> probabilities = graph(images)                      # NCHW float32 array in, array out
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from kuiperinfer import (
    layers,  # noqa: F401  (registers every layer)
    optimizer,
)
from kuiperinfer.convert import resolve_model
from kuiperinfer.errors import KuiperError
from kuiperinfer.runtime.graph import GraphState, RuntimeGraph
from kuiperinfer.runtime.memory import keep_freed_memory
from kuiperinfer.tensor import Tensor

__all__ = ["load", "RuntimeGraph", "GraphState", "Tensor", "KuiperError"]
__version__ = "0.1.0"


def load(param_path: str | os.PathLike, bin_path: str | os.PathLike | None = None, *,
         optimize: bool = True, workers: int | None = None,
         max_tensor_bytes: int | None = None, warmup: bool = True, seed: int = 0,
         graph_class: type[RuntimeGraph] = RuntimeGraph,
         input_shapes: Sequence[Sequence[int]] | None = None,
         dynamic_shapes: Sequence[Sequence[int]] | None = None) -> RuntimeGraph:
    """Load a pnnx export and build it, ready to run.

    ``bin_path`` defaults to the ``.bin`` beside the ``.param`` (``m.pnnx.param`` ->
    ``m.pnnx.bin``). ``workers`` is how many threads a batch is split over (see
    :class:`RuntimeGraph`); it defaults to the number of CPUs. ``optimize=False`` switches
    every optimisation off: the graph runs exactly as pnnx wrote it, whole, in the calling
    thread (``workers`` then defaults to 1), and the process's allocator is left alone
    (optimised loading tunes it once to keep freed memory for the next run, see
    :mod:`kuiperinfer.runtime.memory`). ``max_tensor_bytes`` bounds what the model may
    declare for one weight or operand (default 4 GiB): larger ones are refused before
    anything is allocated. ``warmup`` runs the built graph once on zeros of its declared
    input shapes before returning (:meth:`RuntimeGraph.warm_up`; a size pnnx left open
    taken as 1), so that the first call is as fast and adds as little memory as the rest;
    an error there is raised from ``load``, unless it came from such a size. ``seed``
    seeds the random operators (``torch.randn``, ``torch.normal``, ...):
    the same model loaded with the same seed and options draws the same values, call after
    call (see :mod:`kuiperinfer.layers.randomness`). ``graph_class`` may be a subclass of
    RuntimeGraph that overrides ``run_node`` to trace or profile (as
    :class:`kuiperinfer.profiler.ProfilingGraph` does). Raises a :class:`KuiperError`
    subclass for anything wrong with the files or an unsupported operator.

    ``param_path`` may also be an ONNX (.onnx) or TorchScript (.pt) file: pnnx converts it
    first into a cache keyed by its content and ``input_shapes``/``dynamic_shapes`` (one
    shape per input; see :func:`kuiperinfer.convert.convert`).
    """
    param_path = resolve_model(param_path, bin_path, input_shapes, dynamic_shapes)
    if workers is None:
        workers = (os.cpu_count() or 1) if optimize else 1
    graph = graph_class(param_path, bin_path, workers=workers, max_tensor_bytes=max_tensor_bytes, seed=seed)
    graph.init()
    if optimize:
        optimizer.optimize(graph)
        keep_freed_memory()
    graph.build()
    if warmup:
        graph.warm_up()
    return graph
