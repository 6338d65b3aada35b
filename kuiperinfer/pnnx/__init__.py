"""Faithful PNNX IR: read, inspect and write pnnx's ``.pnnx.param`` / ``.pnnx.bin`` pair.

>>> from kuiperinfer.pnnx import load_graph
>>> graph = load_graph("model.pnnx.param")     # model.pnnx.bin beside it
>>> [op.type for op in graph.ops]
['pnnx.Input', 'nn.Conv2d', ...]

The modules, each importing only those before it: :mod:`~kuiperinfer.pnnx.dtypes` (the
element types), :mod:`~kuiperinfer.pnnx.ir` (the data model), :mod:`~kuiperinfer.pnnx.param_file`
(the text format, parameter values included), :mod:`~kuiperinfer.pnnx.storezip` (the
archive) and :mod:`~kuiperinfer.pnnx.loading` (the pair of files).
"""

from kuiperinfer.pnnx.dtypes import (
    DATA_TYPES,
    DataType,
    bf16_to_float32,
    dtype_from_numpy,
    dtype_from_suffix,
    itemsize,
    numpy_dtype,
    storage_dtype,
    suffix_of,
)
from kuiperinfer.pnnx.ir import Attribute, Graph, Operand, Operator, Parameter, ParamType
from kuiperinfer.pnnx.loading import default_bin_path, load_graph, save_graph
from kuiperinfer.pnnx.param_file import (
    DEFAULT_MAX_TENSOR_BYTES,
    encode_parameter,
    format_float,
    format_param,
    parameter_text,
    parse_param,
    parse_parameter,
    read_param,
)
from kuiperinfer.pnnx.storezip import StoreZipReader, StoreZipWriter

__all__ = [
    "Graph", "Operator", "Operand", "Parameter", "ParamType", "Attribute",
    "DataType", "DATA_TYPES", "dtype_from_suffix", "suffix_of", "numpy_dtype", "storage_dtype",
    "itemsize", "dtype_from_numpy", "bf16_to_float32",
    "load_graph", "save_graph", "default_bin_path",
    "read_param", "parse_param", "format_param", "DEFAULT_MAX_TENSOR_BYTES",
    "parse_parameter", "encode_parameter", "parameter_text", "format_float",
    "StoreZipReader", "StoreZipWriter",
]
