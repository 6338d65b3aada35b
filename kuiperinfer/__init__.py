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
    from kuiperinfer.runtime.options import LoadOptions
    from kuiperinfer.tensor import Tensor

__all__ = ["load", "quantize", "LoadOptions", "RuntimeGraph", "GraphState", "ThreadPool", "Tensor", "KuiperError"]
__version__ = "0.1.0"

LayerRegisterer.add_source("kuiperinfer.layers")   # every layer registers when the first is asked for

_NAMES = {"RuntimeGraph": "kuiperinfer.runtime.graph", "GraphState": "kuiperinfer.runtime.graph",
          "LoadOptions": "kuiperinfer.runtime.options", "quantize": "kuiperinfer.quantization",
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
         options: LoadOptions | None = None, graph_class: type[RuntimeGraph] | None = None,
         input_shapes: Sequence[Sequence[int]] | None = None,
         dynamic_shapes: Sequence[Sequence[int]] | None = None, **option_values: Any) -> RuntimeGraph:
    """Load a pnnx export and build it, ready to run.

    The load options are the fields of :class:`~kuiperinfer.runtime.options.LoadOptions`,
    given as keywords or as one ``options`` object (keywords then replace its fields), each
    deciding one thing: ``optimize`` (fuse operators; False keeps every value pnnx named),
    ``kernels`` (``"compiled"`` or the NumPy ``"reference"``), ``precision`` (``"fp32"``,
    ``"bf16"``, ``"int8"`` with a ``calibration`` table), ``threads`` (default: one per CPU
    this process may use), ``spin``, ``pin``, ``pool`` (a ThreadPool shared with other graphs),
    ``keep_freed_memory``, ``warmup``, ``seed`` (of the model's random operators) and
    ``max_tensor_bytes``. ``graph_class`` is a :class:`RuntimeGraph` subclass whose
    ``run_node`` traces or profiles (as :class:`kuiperinfer.profiler.ProfilingGraph` does).

    ``bin_path`` defaults to the ``.bin`` beside the ``.param`` (``m.pnnx.param`` ->
    ``m.pnnx.bin``). ``param_path`` may also be an ONNX (.onnx) or TorchScript (.pt) file:
    pnnx converts it first into a cache keyed by its content and ``input_shapes``/
    ``dynamic_shapes`` (one shape per input; see :func:`kuiperinfer.convert.convert`).
    Raises a :class:`KuiperError` subclass for anything wrong with the options (an
    :class:`~kuiperinfer.errors.OptionError`), the files or an unsupported operator.
    """
    from kuiperinfer import optimizer
    from kuiperinfer.convert import resolve_model
    from kuiperinfer.runtime.graph import RuntimeGraph
    from kuiperinfer.runtime.memory import keep_freed_memory
    from kuiperinfer.runtime.options import LoadOptions

    options = LoadOptions.of(options, **option_values)
    param_path = resolve_model(param_path, bin_path, input_shapes, dynamic_shapes)
    graph = (graph_class or RuntimeGraph)(param_path, bin_path, options)
    graph.init()
    if options.optimize:
        optimizer.optimize(graph)
    if options.keep_freed_memory:
        keep_freed_memory()
    graph.build()
    if options.warmup:
        graph.warm_up()
    return graph
