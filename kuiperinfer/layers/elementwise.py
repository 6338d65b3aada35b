"""Elementwise operators pnnx writes as ``torch.*`` calls: lgamma, positive and the bitwise
functions.

pnnx keeps ``torch.lgamma`` and ``torch.positive`` as operators of their own (no
``pnnx.Expression`` function exists for them), and writes ``torch.bitwise_and/or/xor``
and ``torch.bitwise_left_shift/right_shift`` (also for ``Tensor.bitwise_*``) with their
operands ``input`` and ``other``, each an input (``$other=1``) or a number
(``other=3``, ``input=5``). The operators ``&``, ``|``, ``^``, ``<<`` and ``>>`` reach the
file as ``pnnx.Expression`` functions instead (``and(@0,3)``); both spellings compute
the same thing, so the bitwise layers evaluate the expression function of the same name.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kuiperinfer.errors import ExpressionError, InferError, InferStatus
from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.expression import Expression, compile_expression
from kuiperinfer.layers.base import NonParamLayer
from kuiperinfer.layers.comparison import Argument
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer

# -- lgamma ---------------------------------------------------------------------------

# Stirling's series for log Gamma: (z - 1/2) log z - z + log(2 pi)/2 + sum B_2k / (2k (2k-1) z^(2k-1)),
# the B_2k Bernoulli numbers 1/6, -1/30, 1/42, -1/30, 5/66, -691/2730, 7/6. From z = 10 on, the
# first term left out is below 1e-16 of the result.
_STIRLING_TERMS = (1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188, -691 / 360360, 1 / 156)
_STIRLING_FROM = 10.0
_HALF_LOG_TWO_PI = 0.5 * math.log(2 * math.pi)


def _log_gamma_from_half(x: np.ndarray) -> np.ndarray:
    """log Gamma(x) for float64 x >= 0.5: raise x to z >= 10 by Gamma(x) = Gamma(x + k) /
    (x (x+1) ... (x+k-1)), then Stirling's series."""
    z = x.copy()
    product = np.ones_like(x)
    small = z < _STIRLING_FROM
    while small.any():  # at most ten steps
        product[small] *= z[small]
        z[small] += 1.0
        small = z < _STIRLING_FROM
    inverse, inverse_squared = 1.0 / z, 1.0 / (z * z)
    series = np.zeros_like(z)
    for term in reversed(_STIRLING_TERMS):  # Horner in 1/z^2
        series = series * inverse_squared + term
    return (z - 0.5) * np.log(z) - z + _HALF_LOG_TWO_PI + series * inverse - np.log(product)


def log_gamma(x: np.ndarray) -> np.ndarray:
    """``torch.lgamma``: log |Gamma(x)|, computed in float64, returned as float32 (float64 and
    float16 stay as they are; integers and bools give float32).

    Below 1/2 the reflection formula Gamma(x) Gamma(1 - x) = pi / sin(pi x) brings x into
    the range of Stirling's series, with sin(pi x) taken of x minus its nearest integer so
    that it stays exact near the poles 0, -1, -2, ..., where the result is +inf (as in
    torch); +-inf give +inf, NaN stays NaN.
    """
    out_dtype = x.dtype if x.dtype.kind == "f" else np.dtype(np.float32)
    v = x.astype(np.float64)
    result = np.empty_like(v)
    with np.errstate(all="ignore"):
        right = v >= 0.5
        result[right] = _log_gamma_from_half(v[right])
        left = v < 0.5  # NaN is neither
        w = v[left]
        sin_pi = np.abs(np.sin(np.pi * (w - np.round(w))))
        result[left] = np.log(np.pi / sin_pi) - _log_gamma_from_half(1.0 - w)
        result[(v == 1.0) | (v == 2.0)] = 0.0  # Gamma(1) = Gamma(2) = 1 exactly
        result[np.isinf(v)] = np.inf
        result[np.isnan(v)] = np.nan
        return result.astype(out_dtype)  # beyond float32's range: inf, as torch gives


@register_layer("torch.lgamma")
class LGamma(NonParamLayer):
    batch_independent = True

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> LGamma:
        return cls(op.name)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        return [log_gamma(np.asarray(inputs[0]))]


@register_layer("torch.positive")
class Positive(NonParamLayer):
    """``+x``: the input itself; refused for bool, as in torch."""

    batch_independent = True

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Positive:
        return cls(op.name)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        if x.dtype == np.bool_:
            raise InferError("positive (the + operator) is not defined for bool values, as in torch",
                             status=InferStatus.kInferFailedOperationUnknown)
        return [x]


# -- bitwise ---------------------------------------------------------------------------

_BITWISE = {
    "torch.bitwise_and": "and", "torch.bitwise_or": "or", "torch.bitwise_xor": "xor",
    "torch.bitwise_left_shift": "lshift", "torch.bitwise_right_shift": "rshift",
}


@register_layer(*_BITWISE)
class Bitwise(NonParamLayer):
    """``input <op> other`` on bool and integer values with torch's promotion; a shift by a
    negative amount or by the width or more gives 0 (the sign for ``>>``), as in torch.
    Floating-point operands are refused."""

    batch_independent = True

    def __init__(self, layer_name: str, function: Expression, operands: tuple[Argument, Argument]):
        super().__init__(layer_name)
        self.function, self.operands = function, operands

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Bitwise:
        operands = (Argument.of(op, "input", 0), Argument.of(op, "other", 1))
        for name, operand in zip(("input", "other"), operands):
            if operand.index is None and (type(operand.value) not in (bool, int)):
                raise op.error(f"{name} {operand.value!r} must be an input, an integer or a bool",
                               Status.kParameterInvalidValue)
        return cls(op.name, compile_expression(f"{_BITWISE[op.type]}(@0,@1)"), operands)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        try:
            result = self.function.evaluate([operand.get(inputs) for operand in self.operands])
        except ExpressionError as exc:
            raise InferError(exc.reason, status=InferStatus.kInferFailedOperationUnknown) from exc
        return [np.asarray(result)]
