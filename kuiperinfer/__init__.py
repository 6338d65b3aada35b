"""kuiperinfer: a small, readable inference engine for PNNX models, running on NumPy.

>>> import kuiperinfer
>>> graph = kuiperinfer.load("resnet18.pnnx.param")   # finds resnet18.pnnx.bin beside it
>>> probabilities = graph(images)                      # NCHW float32 array in, array out

Importing the package is light: NumPy, Numba and the layers are imported when first used
(the names below, a subpackage as an attribute, or the first graph built), so that
``kuiper --help`` answers at once and nothing is written before a kernel is needed.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kuiperinfer.errors import KuiperError
from kuiperinfer.runtime.registry import LayerRegisterer

if TYPE_CHECKING:
    from kuiperinfer.kernels.parallel import ThreadPool
    from kuiperinfer.runtime.graph import GraphState, RuntimeGraph
    from kuiperinfer.tensor import Tensor

__all__ = ["load", "quantize", "RuntimeGraph", "GraphState", "ThreadPool", "Tensor", "KuiperError"]
__version__ = "0.1.0"

LayerRegisterer.add_source("kuiperinfer.layers")   # every layer registers when the first is asked for

_NAMES = {"RuntimeGraph": "kuiperinfer.runtime.graph", "GraphState": "kuiperinfer.runtime.graph",
          "quantize": "kuiperinfer.quantization",
          "ThreadPool": "kuiperinfer.kernels.parallel", "Tensor": "kuiperinfer.tensor"}


def __getattr__(name: str) -> Any:
    """The classes of ``__all__`` and the subpackages, imported on first use."""
    if name in _NAMES:
        value = getattr(importlib.import_module(_NAMES[name]), name)
    elif not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def load(param_path: str | os.PathLike, bin_path: str | os.PathLike | None = None, *,
         optimize: bool = True, kernels: str = "compiled", precision: str = "fp32",
         calibration: str | os.PathLike | None = None, workers: int | None = None,
         spin: str = "auto", pool: ThreadPool | None = None, keep_freed_memory: bool = False,
         warmup: bool = True, seed: int = 0, max_tensor_bytes: int | None = None,
         graph_class: type[RuntimeGraph] | None = None,
         input_shapes: Sequence[Sequence[int]] | None = None,
         dynamic_shapes: Sequence[Sequence[int]] | None = None) -> RuntimeGraph:
    """Load a pnnx export and build it, ready to run. Each option decides one thing:

    - ``optimize``: rewrite the graph (fuse operators, pick Winograd and channels-last
      memory; :mod:`kuiperinfer.optimizer`). False runs the operators exactly as pnnx wrote
      them, so that every value pnnx named can be fetched.
    - ``kernels``: ``"compiled"``, Numba's kernels (the NumPy references where Numba cannot
      be imported), or ``"reference"``, the NumPy kernels they are tested against.
    - ``precision``: what the products of convolutions and linear layers compute:
      ``"fp32"``; ``"bf16"``, their inputs rounded to bfloat16; ``"int8"``, uint8
      activations and int8 weights, with the activations' ranges from ``calibration``, a
      table :func:`kuiperinfer.quantize` wrote (:mod:`kuiperinfer.kernels.matrix.precision`;
      ``graph.precision`` says how this machine computes it).
    - ``workers``: the threads a run uses, the caller's included (default: one per CPU;
      1 runs everything in the calling thread): the graph's own
      :class:`~kuiperinfer.kernels.parallel.ThreadPool`. See :class:`RuntimeGraph`.
    - ``spin``: how the pool's threads wait between an operator's parts: ``"auto"`` spins
      while the machine is quiet and blocks while other processes want the cores,
      ``"always"`` spins, ``"never"`` blocks.
    - ``pool``: a :class:`~kuiperinfer.kernels.parallel.ThreadPool` to share with other
      graphs instead of one of the graph's own (then ``workers`` and ``spin`` are the pool's).
    - ``keep_freed_memory``: tune glibc's malloc to keep freed memory for the next run
      (:mod:`kuiperinfer.runtime.memory`). Off by default: it is a process-wide setting that
      other code in the process lives with too.
    - ``warmup``: end with one run on zeros of the declared input shapes
      (:meth:`RuntimeGraph.warm_up`; a size pnnx left open taken as 1, skipped where the
      model cannot run on zeros), so that the first call is as fast as the rest.
    - ``seed``: seeds the random operators (``torch.randn``, ...): the same model loaded
      with the same seed draws the same values, call after call
      (:mod:`kuiperinfer.layers.randomness`).
    - ``max_tensor_bytes``: the largest weight or value the model may declare (default
      4 GiB); larger ones are refused before anything is allocated.
    - ``graph_class``: a :class:`RuntimeGraph` subclass whose ``run_node`` traces or profiles
      (as :class:`kuiperinfer.profiler.ProfilingGraph` does).

    ``bin_path`` defaults to the ``.bin`` beside the ``.param`` (``m.pnnx.param`` ->
    ``m.pnnx.bin``). ``param_path`` may also be an ONNX (.onnx) or TorchScript (.pt) file:
    pnnx converts it first into a cache keyed by its content and ``input_shapes``/
    ``dynamic_shapes`` (one shape per input; see :func:`kuiperinfer.convert.convert`).
    Raises a :class:`KuiperError` subclass for anything wrong with the files or an
    unsupported operator.
    """
    from kuiperinfer import optimizer
    from kuiperinfer.convert import resolve_model
    from kuiperinfer.runtime.graph import RuntimeGraph
    from kuiperinfer.runtime.memory import keep_freed_memory as tune_allocator

    param_path = resolve_model(param_path, bin_path, input_shapes, dynamic_shapes)
    if pool is not None and workers not in (None, pool.threads):
        raise KuiperError(f"workers={workers} with a pool of {pool.threads} threads: give one or the other")
    if workers is None:
        workers = os.cpu_count() or 1
    graph = (graph_class or RuntimeGraph)(param_path, bin_path, workers=workers, spin=spin, pool=pool,
                                          kernels=kernels, precision=precision, calibration=calibration,
                                          max_tensor_bytes=max_tensor_bytes,
                                          seed=seed)
    graph.init()
    if optimize:
        optimizer.optimize(graph)
    if keep_freed_memory:
        tune_allocator()
    graph.build()
    if warmup:
        graph.warm_up()
    return graph
