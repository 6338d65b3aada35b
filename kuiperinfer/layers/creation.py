"""Creating and converting tensors: zeros_like/ones_like/full_like, zeros/ones/full,
new_zeros/new_ones, and dtype casts (``Tensor.to``, ``Tensor.type_as``).

pnnx names dtypes as PyTorch prints them (``dtype=torch.float``, ``torch.long``,
``torch.half``); ``dtype=None`` means "as the input" for the ``*_like`` and ``new_*``
forms, and float32 (or the fill value's type) for ``torch.zeros``/``ones``/``full``.

pnnx folds these operators into constants (``pnnx.Attribute``) when the shape is fixed
at export; they survive in exports with dynamic shapes. It also removes casts to and
from float16 (it exports float16 models as float32). A ``torch.half`` cast that does reach
us is honoured: the result is a float16 array, and later NumPy arithmetic on it works in
float32 and rounds each result back to float16.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.layers.base import NonParamLayer
from kuiperinfer.pnnx.ir import DATA_TYPES, numpy_dtype
from kuiperinfer.pnnx.param_file import DEFAULT_MAX_TENSOR_BYTES
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.registry import register_layer

_TORCH_DTYPES: dict[str, np.dtype] = {t.torch: t.numpy for t in DATA_TYPES if t.numpy is not None}
"""``torch.float`` -> float32, ``torch.long`` -> int64, ...: the names pnnx writes."""


def dtype_param(op: RuntimeOperator) -> np.dtype | None:
    """The NumPy dtype of the ``dtype=torch.X`` parameter; None when absent or None."""
    name = op.param_value("dtype")
    if name is None:
        return None
    if name not in _TORCH_DTYPES:
        raise op.error(f"unsupported dtype {name!r} (NumPy has no such type; supported: "
                       f"{', '.join(sorted(_TORCH_DTYPES))})", Status.kParameterInvalidValue)
    return _TORCH_DTYPES[name]


@register_layer("Tensor.to", "Tensor.type")
class Cast(NonParamLayer):
    """Convert to ``dtype`` as PyTorch does: floats to integers truncate toward zero,
    anything to bool tests for non-zero. ``dtype=None`` (a device move) changes nothing."""

    batch_independent = True

    def __init__(self, layer_name: str, dtype: np.dtype | None):
        super().__init__(layer_name)
        self.dtype = dtype

    @classmethod
    def create(cls, op: RuntimeOperator) -> Cast:
        return cls(op.name, dtype_param(op))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        return [x if self.dtype is None else x.astype(self.dtype, copy=False)]


@register_layer("Tensor.type_as")
class TypeAs(NonParamLayer):
    """Convert the input to the dtype of the second input (``$other``)."""

    def __init__(self, layer_name: str, other: int):
        super().__init__(layer_name)
        self.other = other

    @classmethod
    def create(cls, op: RuntimeOperator) -> TypeAs:
        other = op.input_index("other", 1)
        if other is None:
            raise op.error("missing input 'other'", Status.kParameterMissingUnknown)
        return cls(op.name, other)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        return [inputs[0].astype(inputs[self.other].dtype, copy=False)]


_FILL_VALUES = {"zeros": 0, "ones": 1}


def _fill_value(op: RuntimeOperator) -> bool | int | float:
    """0 for zeros, 1 for ones, the ``fill_value`` parameter for full (``inf`` and ``nan`` too)."""
    kind = op.type.rsplit(".", 1)[-1].removeprefix("new_").removesuffix("_like")
    if kind in _FILL_VALUES:
        return _FILL_VALUES[kind]
    value = op.param_number("fill_value")
    if value is None:
        raise op.error("parameter 'fill_value' is None", Status.kParameterInvalidValue)
    return value


@register_layer("torch.zeros_like", "torch.ones_like", "torch.full_like")
class FullLike(NonParamLayer):
    """A tensor of the input's shape filled with one value, in ``dtype`` or the input's dtype."""

    def __init__(self, layer_name: str, value: bool | int | float, dtype: np.dtype | None):
        super().__init__(layer_name)
        self.value, self.dtype = value, dtype

    @classmethod
    def create(cls, op: RuntimeOperator) -> FullLike:
        return cls(op.name, _fill_value(op), dtype_param(op))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        return [np.full(x.shape, self.value, dtype=x.dtype if self.dtype is None else self.dtype)]


@register_layer("torch.zeros", "torch.ones", "torch.full", "Tensor.new_zeros", "Tensor.new_ones")
class Full(NonParamLayer):
    """A tensor of a given ``size`` filled with one value. The size is a parameter or an
    input ``$size`` (a shape computed at run time). Without ``dtype``, PyTorch picks the
    input's dtype (``new_*``), the fill value's (``full``) or float32; pnnx records the
    result in the output's dtype, which is used here."""

    def __init__(self, layer_name: str, value: bool | int | float, dtype: np.dtype,
                 size: tuple[int, ...] | None, size_input: int | None):
        super().__init__(layer_name)
        self.value, self.dtype, self.size, self.size_input = value, dtype, size, size_input

    @classmethod
    def create(cls, op: RuntimeOperator) -> Full:
        size = op.param_ints("size", status=Status.kParameterMissingShape, default=None)
        size_input = None
        if size is None:
            size_input = op.input_index("size", 1 if op.type.startswith("Tensor.") else 0)
            if size_input is None:
                raise op.error("missing parameter 'size'", Status.kParameterMissingShape)
        dtype = dtype_param(op)
        if dtype is None and op.output_operands:
            dtype = numpy_dtype(op.output_operands[0].type)
        if dtype is None:
            dtype = np.dtype(np.float32)
        if size is not None and (min(size, default=0) < 0
                                 or math.prod(size) * dtype.itemsize > DEFAULT_MAX_TENSOR_BYTES):
            raise op.error(f"size {size} is negative or over the limit of {DEFAULT_MAX_TENSOR_BYTES} bytes",
                           Status.kParameterInvalidValue)
        return cls(op.name, _fill_value(op), dtype, size, size_input)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        size = self.size if self.size_input is None else tuple(int(s) for s in inputs[self.size_input])
        return [np.full(size, self.value, dtype=self.dtype)]
