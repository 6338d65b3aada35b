"""Models and operators written by hand, for what PyTorch or pnnx will not produce:
parameters that a layer must refuse, forms pnnx never writes."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from kuiperinfer.runtime.operand import RuntimeOperand
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.parameter import RuntimeParameter
from kuiperinfer.runtime.parameter import RuntimeParameterType as T


def write_model(directory: Path, param: str, weights: dict[str, np.ndarray | tuple[int, ...]],
                name: str = "m", seed: int = 0) -> Path:
    """Write ``param`` and an archive of ``weights`` (an array, or a shape to fill with random
    normal values) as ``name.pnnx.param``/``.bin``; returns the .param path."""
    rng = np.random.default_rng(seed)
    (directory / f"{name}.pnnx.param").write_text(param)
    with zipfile.ZipFile(directory / f"{name}.pnnx.bin", "w", zipfile.ZIP_STORED) as archive:
        for key, value in weights.items():
            array = rng.standard_normal(value) if isinstance(value, tuple) else value
            archive.writestr(key, np.ascontiguousarray(array, np.float32).tobytes())
    return directory / f"{name}.pnnx.param"


def one_operator_model(directory: Path, op_type: str, params: str, entries=None,
                       shape: str = "1,3,4,5") -> Path:
    """A .param/.bin pair with one operator ``op`` on an input of ``shape``."""
    param = ("7767517\n3 2\n"
             f"pnnx.Input in 0 1 x #x=({shape})f32\n"
             f"{op_type} op 1 1 x y {params} #x=({shape})f32 #y=({shape})f32\n"
             f"pnnx.Output out 1 0 y #y=({shape})f32\n")
    return write_model(directory, param, entries or {})


def make_operator(type_name: str, input_shapes: list[list[int]], **params) -> RuntimeOperator:
    op = RuntimeOperator("conv", type_name)
    for i, shape in enumerate(input_shapes):
        operand = RuntimeOperand(f"in{i}", shape, 1, "producer")
        op.input_operands_seq.append(operand)
    kinds = {bool: T.kParameterBool, int: T.kParameterInt, str: T.kParameterString, tuple: T.kParameterIntArray}
    for key, value in params.items():
        op.params[key] = RuntimeParameter(kinds[type(value)], value, str(value))
    return op
