"""A loaded model as the server offers it: a name, a graph, and its inputs and outputs as
the Open Inference Protocol describes them (datatype, shape with -1 for the batch)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import kuiperinfer
from kuiperinfer import RuntimeGraph
from kuiperinfer.convert import CONVERTIBLE_SUFFIXES, cached_conversion
from kuiperinfer.serve.protocol import DATATYPES, TensorSpec, datatype_of

_PNNX_DATATYPES = {"f32": "FP32", "f64": "FP64", "f16": "FP16", "i64": "INT64", "i32": "INT32",
                   "i16": "INT16", "i8": "INT8", "u8": "UINT8", "bool": "BOOL"}
_OPERAND = re.compile(r"#([^=\s]+)=\(([^)]*)\)(\w+)")
"""An operand's shape and type in a .pnnx.param line: ``#12=(1,3,?,?)f32``."""


@dataclass
class ServedModel:
    """A model the server runs: ``graph`` with the protocol's description of its tensors."""

    name: str
    graph: RuntimeGraph
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    path: Path
    joinable: bool = field(default=True)
    """Whether requests may share a run: cleared when a joined run's outputs did not keep
    the batch as their first dimension."""

    @classmethod
    def load(cls, path: str | os.PathLike, name: str | None = None, **load_options: Any) -> ServedModel:
        """Load a .pnnx.param (or an ONNX/TorchScript file whose shapes need no telling).

        ``name`` defaults to the file name without ``.pnnx.param`` (or the suffix);
        ``load_options`` go to :func:`kuiperinfer.load`.
        """
        path = Path(path)
        param_path = cached_conversion(path) if path.suffix.lower() in CONVERTIBLE_SUFFIXES else path
        graph = kuiperinfer.load(param_path, **load_options)
        inputs, outputs = describe(graph, param_path)
        return cls(name or model_name(path), graph, inputs, outputs, path)

    def metadata(self) -> dict[str, Any]:
        """The protocol's model metadata."""
        return {"name": self.name, "versions": ["1"], "platform": "kuiperinfer_pnnx",
                "inputs": [spec.to_dict() for spec in self.inputs],
                "outputs": [spec.to_dict() for spec in self.outputs]}


def model_name(path: Path) -> str:
    """``models/resnet18.pnnx.param`` -> ``resnet18``; ``det.onnx`` -> ``det``."""
    name = path.name
    for suffix in (".pnnx.param", *CONVERTIBLE_SUFFIXES):
        if name.lower().endswith(suffix):
            return name[:-len(suffix)]
    return path.stem


def describe(graph: RuntimeGraph, param_path: str | os.PathLike) -> tuple[tuple[TensorSpec, ...],
                                                                          tuple[TensorSpec, ...]]:
    """The graph's inputs and outputs with datatype and shape, the batch as -1.

    Types and shapes come from what pnnx recorded in the .param; when every input
    dimension but the batch is fixed, a run on zeros at batch 2 replaces the outputs'
    with what the graph really returns.
    """
    declared = _declared_operands(Path(param_path))
    input_types = _input_types(Path(param_path))
    inputs = tuple(TensorSpec(name, input_types.get(name, "FP32"), _batch_open(shape))
                   for name, shape in zip(graph.input_names, graph.input_shapes))
    outputs = tuple(TensorSpec(name, *_open_batch(declared.get(name, ("FP32", ()))))
                    for name in graph.output_names)
    if all(spec.shape and min(spec.shape[1:], default=1) > 0 for spec in inputs):
        zeros = {spec.name: np.zeros((2, *spec.shape[1:]), _numpy_dtype(spec.datatype))
                 for spec in inputs}
        with np.errstate(all="ignore"):  # zeros may divide by zero where real inputs do not
            results = graph.run(zeros)
        outputs = tuple(TensorSpec(name, datatype_of(array.dtype),
                                   _batch_open(array.shape) if array.ndim and array.shape[0] == 2
                                   else tuple(array.shape))
                        for name, array in zip(graph.output_names, results))
    return inputs, outputs


def _batch_open(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (-1, *shape[1:]) if shape else shape


def _open_batch(declared: tuple[str, tuple[int, ...]]) -> tuple[str, tuple[int, ...]]:
    datatype, shape = declared
    return datatype, _batch_open(shape)


def _numpy_dtype(datatype: str) -> np.dtype:
    dtype = DATATYPES[datatype]
    return dtype if dtype is not None else np.dtype(np.float32)


def _declared_operands(param_path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Every operand's datatype and shape (-1 for ``?``) as pnnx declared them."""
    operands: dict[str, tuple[str, tuple[int, ...]]] = {}
    for match in _OPERAND.finditer(param_path.read_text(encoding="utf-8", errors="replace")):
        name, dims, pnnx_type = match.groups()
        if pnnx_type in _PNNX_DATATYPES:
            shape = tuple(-1 if d.strip() == "?" else int(d) for d in dims.split(",") if d.strip())
            operands[name] = (_PNNX_DATATYPES[pnnx_type], shape)
    return operands


def _input_types(param_path: Path) -> dict[str, str]:
    """The datatype of each pnnx.Input operator, by the operator's name."""
    types: dict[str, str] = {}
    for line in param_path.read_text(encoding="utf-8", errors="replace").splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "pnnx.Input":
            match = _OPERAND.search(line)
            if match and match.group(3) in _PNNX_DATATYPES:
                types[fields[1]] = _PNNX_DATATYPES[match.group(3)]
    return types
