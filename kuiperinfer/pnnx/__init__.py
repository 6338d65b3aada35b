"""Faithful PNNX IR: read, inspect and write pnnx's ``.pnnx.param`` / ``.pnnx.bin`` pair.

>>> from kuiperinfer.pnnx import Graph
>>> graph = Graph.load("model.pnnx.param")     # model.pnnx.bin beside it
>>> [op.type for op in graph.ops]
['pnnx.Input', 'nn.Conv2d', ...]

See :mod:`kuiperinfer.pnnx.ir` for the data model, :mod:`~kuiperinfer.pnnx.param_file`
for the text format and :mod:`~kuiperinfer.pnnx.storezip` for the archive.
"""

from kuiperinfer.pnnx.ir import (
    DATA_TYPES,
    Attribute,
    DataType,
    Graph,
    Operand,
    Operator,
    Parameter,
    ParamType,
    bf16_to_float32,
    default_bin_path,
    dtype_from_numpy,
    dtype_from_suffix,
    format_float,
    itemsize,
    numpy_dtype,
    storage_dtype,
    suffix_of,
)
from kuiperinfer.pnnx.param_file import DEFAULT_MAX_TENSOR_BYTES, format_param, parse_param, read_param
from kuiperinfer.pnnx.storezip import StoreZipReader, StoreZipWriter

__all__ = [
    "Graph", "Operator", "Operand", "Parameter", "ParamType", "Attribute",
    "DataType", "DATA_TYPES", "dtype_from_suffix", "suffix_of", "numpy_dtype", "storage_dtype",
    "itemsize", "dtype_from_numpy", "bf16_to_float32", "format_float", "default_bin_path",
    "read_param", "parse_param", "format_param", "DEFAULT_MAX_TENSOR_BYTES",
    "StoreZipReader", "StoreZipWriter",
]
