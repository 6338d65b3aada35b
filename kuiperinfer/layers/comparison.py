"""Comparisons, logic, NaN/inf tests and clamping: elementwise operators built on ordering.

Comparisons and logical operators return bool arrays, as in PyTorch. Their second
operand is what pnnx calls ``other``: either another input (``$other=1``) or a number
written as a parameter (``other=0.5``). :class:`Argument` captures that choice once,
at build time; ``RuntimeOperator.param_number`` reads such numbers, including the words ``inf``,
``-inf`` and ``nan.0`` that pnnx writes for non-finite floats. The other layer
families that take "a tensor or a number" (where, masked_fill, full_like) use them too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.expression.promotion import result_type
from kuiperinfer.layers.base import NonParamLayer
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer

_MISSING = object()


@dataclass(frozen=True)
class Argument:
    """An operand that pnnx writes either as an input or as a number parameter of one name."""

    index: int | None
    """Position among the operator's inputs, or None for a constant."""
    value: Any = None
    """The constant (a Python number, or None) when ``index`` is None."""

    @classmethod
    def of(cls, op: RuntimeOperator, name: str, position: int | None = None,
           default: Any = _MISSING) -> Argument:
        """Input ``$name`` if there is one (or unnamed input ``position``), else parameter ``name``."""
        index = op.input_index(name, position)
        if index is not None:
            return cls(index)
        return cls(None, op.param_number(name, default))

    @property
    def absent(self) -> bool:
        """A None parameter: the operand was not given."""
        return self.index is None and self.value is None

    def get(self, inputs: Sequence[Any]) -> Any:
        return self.value if self.index is None else inputs[self.index]


# -- comparisons and logic -----------------------------------------------------------

_BINARY: dict[str, Callable[[Any, Any], np.ndarray]] = {
    "eq": np.equal, "ne": np.not_equal, "gt": np.greater, "ge": np.greater_equal,
    "lt": np.less, "le": np.less_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor,
}

_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "logical_not": np.logical_not,
    "bitwise_not": np.invert,           # ~mask: logical not on bool, bitwise on integers
    "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite,
    "isposinf": np.isposinf, "isneginf": np.isneginf,
}


def _function_name(op_type: str) -> str:
    """``torch.gt`` -> ``gt``; ``aten::isnan`` -> ``isnan``."""
    return op_type.replace("::", ".").rsplit(".", 1)[-1]


@register_layer("torch.eq", "torch.ne", "torch.gt", "torch.ge", "torch.lt", "torch.le",
                "torch.logical_and", "torch.logical_or", "torch.logical_xor")
class BinaryPredicate(NonParamLayer):
    """``input <op> other`` elementwise with broadcasting; ``other`` may be a number."""

    def __init__(self, layer_name: str, function: Callable[[Any, Any], np.ndarray], other: Argument):
        super().__init__(layer_name)
        self.function, self.other = function, other

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> BinaryPredicate:
        return cls(op.name, _BINARY[_function_name(op.type)], Argument.of(op, "other", 1))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        return [np.asarray(self.function(inputs[0], self.other.get(inputs)))]


@register_layer("torch.logical_not", "torch.bitwise_not",
                "torch.isnan", "torch.isinf", "torch.isfinite", "torch.isposinf", "torch.isneginf",
                "aten::isnan", "aten::isinf", "aten::isfinite", "aten::isposinf", "aten::isneginf")
class UnaryPredicate(NonParamLayer):
    """A bool-valued test of each element. pnnx has no name of its own for isnan and
    friends and writes them as the TorchScript ``aten::`` operators."""

    def __init__(self, layer_name: str, function: Callable[[np.ndarray], np.ndarray]):
        super().__init__(layer_name)
        self.function = function

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> UnaryPredicate:
        return cls(op.name, _UNARY[_function_name(op.type)])

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        return [np.asarray(self.function(inputs[0]))]


# -- clamp -----------------------------------------------------------------------------

@register_layer("torch.clamp", "Tensor.clamp", "torch.clip", "Tensor.clip")
class Clamp(NonParamLayer):
    """``min(max(x, min), max)``; either bound may be None, a number or a tensor input.

    The result has PyTorch's promoted dtype (an integer tensor clamped to float
    bounds becomes float32); NaN in ``x`` stays NaN.
    """

    def __init__(self, layer_name: str, low: Argument, high: Argument):
        super().__init__(layer_name)
        self.low, self.high = low, high

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Clamp:
        low, high = Argument.of(op, "min", default=None), Argument.of(op, "max", default=None)
        if low.absent and high.absent:
            raise op.error("clamp needs at least one of 'min' and 'max'", Status.kParameterInvalidValue)
        layer = cls(op.name, low, high)
        layer.batch_independent = low.index is None and high.index is None   # number bounds: elementwise
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, low, high = inputs[0], self.low.get(inputs), self.high.get(inputs)
        dtype = result_type(x, *(b for b in (low, high) if b is not None))
        out = x.astype(dtype, copy=False)
        if low is not None:
            out = np.maximum(out, np.asarray(low, dtype=dtype))
        if high is not None:
            out = np.minimum(out, np.asarray(high, dtype=dtype))
        return [out]
