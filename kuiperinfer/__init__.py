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
    from kuiperinfer.runtime.graph import GraphState, RuntimeGraph
    from kuiperinfer.tensor import Tensor

__all__ = ["load", "RuntimeGraph", "GraphState", "Tensor", "KuiperError"]
__version__ = "0.1.0"

LayerRegisterer.add_source("kuiperinfer.layers")   # every layer registers when the first is asked for

_NAMES = {"RuntimeGraph": "kuiperinfer.runtime.graph", "GraphState": "kuiperinfer.runtime.graph",
          "Tensor": "kuiperinfer.tensor"}


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
         optimize: bool = True, workers: int | None = None,
         max_tensor_bytes: int | None = None, warmup: bool = True, seed: int = 0,
         graph_class: type[RuntimeGraph] | None = None,
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
    taken as 1, skipped where the graph cannot run on zeros), so that the first call is as
    fast and adds as little memory as the rest. ``seed``
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
    from kuiperinfer import optimizer
    from kuiperinfer.convert import resolve_model
    from kuiperinfer.runtime.graph import RuntimeGraph
    from kuiperinfer.runtime.memory import keep_freed_memory

    param_path = resolve_model(param_path, bin_path, input_shapes, dynamic_shapes)
    if workers is None:
        workers = (os.cpu_count() or 1) if optimize else 1
    graph = (graph_class or RuntimeGraph)(param_path, bin_path, workers=workers, max_tensor_bytes=max_tensor_bytes,
                                          seed=seed)
    graph.init()
    if optimize:
        optimizer.optimize(graph)
        keep_freed_memory()
    graph.build()
    if warmup:
        graph.warm_up()
    return graph
