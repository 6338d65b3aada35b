"""A loaded model as the server offers it: a name, a graph, and its inputs and outputs as
the Open Inference Protocol describes them (datatype, shape with -1 for the batch)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import kuiperinfer
from kuiperinfer import RuntimeGraph
from kuiperinfer.convert import CONVERTIBLE_SUFFIXES
from kuiperinfer.pnnx.dtypes import numpy_dtype
from kuiperinfer.runtime.operand import RuntimeOperand
from kuiperinfer.serve.protocol import TensorSpec, datatype_of


@dataclass
class ServedModel:
    """A model the server runs: ``graph`` with the protocol's description of its tensors."""

    name: str
    graph: RuntimeGraph
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    path: Path

    @classmethod
    def load(cls, path: str | os.PathLike, name: str | None = None, **load_options: Any) -> ServedModel:
        """Load a .pnnx.param (or an ONNX/TorchScript file whose shapes need no telling).

        ``name`` defaults to the file name without ``.pnnx.param`` (or the suffix);
        ``load_options`` go to :func:`kuiperinfer.load`.
        """
        path = Path(path)
        graph = kuiperinfer.load(path, **load_options)
        inputs, outputs = describe(graph)
        return cls(name or model_name(path), graph, inputs, outputs, path)

    @property
    def joins_requests(self) -> bool:
        """Whether separate requests may share a run: the graph's samples are independent
        and it runs at any batch size."""
        batching = self.graph.batching
        return batching.independent and batching.batch is None

    def metadata(self, max_batch_size: int) -> dict[str, Any]:
        """The protocol's model metadata, with the largest batch requests are joined into
        (``max_batch_size``, as Triton's configuration says it; 0: never joined)."""
        return {"name": self.name, "versions": ["1"], "platform": "kuiperinfer_pnnx",
                "inputs": [spec.to_dict() for spec in self.inputs],
                "outputs": [spec.to_dict() for spec in self.outputs],
                "max_batch_size": max_batch_size}


def model_name(path: Path) -> str:
    """``models/resnet18.pnnx.param`` -> ``resnet18``; ``det.onnx`` -> ``det``."""
    name = path.name
    for suffix in (".pnnx.param", *CONVERTIBLE_SUFFIXES):
        if name.lower().endswith(suffix):
            return name[:-len(suffix)]
    return path.stem


def describe(graph: RuntimeGraph) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """The graph's inputs and outputs with the datatypes and shapes pnnx recorded; the
    batch dimension is -1 unless the graph runs only at one batch size."""
    inputs = tuple(_spec(name, operand, graph)
                   for name, operand in zip(graph.input_names, graph.graph_input_operands()))
    outputs = tuple(_spec(name, graph.operands[name], graph) for name in graph.output_names)
    return inputs, outputs


def _spec(name: str, operand: RuntimeOperand, graph: RuntimeGraph) -> TensorSpec:
    dtype = numpy_dtype(operand.type)
    shape = tuple(operand.shapes)
    if shape and graph.batching.batch is None:
        shape = (-1, *shape[1:])
    try:
        datatype = datatype_of(np.dtype(dtype or np.float32))
    except ValueError:   # a complex output: the protocol has no datatype for it
        datatype = "FP32"
    return TensorSpec(name, datatype, shape)
