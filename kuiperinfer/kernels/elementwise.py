"""Numerically stable elementwise functions, float32 in and float32 out.

The textbook formulas overflow: ``log(1 + exp(x))`` is ``inf`` for x > 88 in float32,
``1 / (1 + exp(-x))`` overflows for x < -88. The forms here never exponentiate a
positive number, so they are exact to float32 rounding for any finite input and
raise no overflow warnings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kuiperinfer.kernels.special import erf

_SQRT_HALF = math.sqrt(0.5)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
# Beyond |x| = 10 the tanh in the GELU approximation is exactly +-1 in float32.
_GELU_TANH_SATURATION = 10.0


def sigmoid(x: np.ndarray) -> np.ndarray:
    """The logistic function 1 / (1 + exp(-x)), as 0.5 * (1 + tanh(x / 2)); the halving
    makes the float copy (a 0-d input stays an array)."""
    return _sigmoid_of_halves(np.asarray(np.multiply(x, 0.5, dtype=np.result_type(x, np.float32))))


def _sigmoid_of_halves(h: np.ndarray) -> np.ndarray:
    """sigmoid(2h) = 0.5 * (1 + tanh(h)), in place of ``h``."""
    np.tanh(h, out=h)
    h += 1
    h *= 0.5
    return h


def softplus(x: np.ndarray) -> np.ndarray:
    """log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|))."""
    y = np.log1p(np.exp(-np.abs(x)))
    y += np.maximum(x, 0)
    return y


def log_sigmoid(x: np.ndarray) -> np.ndarray:
    """log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|))."""
    return np.minimum(x, 0) - np.log1p(np.exp(-np.abs(x)))


def elu(x: np.ndarray, alpha: float) -> np.ndarray:
    """x for x > 0, alpha * (exp(x) - 1) otherwise (expm1 of min(x, 0) never overflows)."""
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


def gelu(x: np.ndarray) -> np.ndarray:
    """x * Phi(x) with the exact normal CDF: 0.5 * x * (1 + erf(x / sqrt(2)))."""
    y = erf(x * _SQRT_HALF)
    y += 1
    y *= x
    y *= 0.5
    return y


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU's tanh approximation: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))).

    The cube is taken of x clipped to where tanh saturates, so it cannot overflow.
    """
    clipped = np.clip(x, -_GELU_TANH_SATURATION, _GELU_TANH_SATURATION)
    y = np.tanh(_SQRT_2_OVER_PI * (clipped + 0.044715 * clipped ** 3))
    y += 1
    y *= x
    y *= 0.5
    return y


# -- activations in place, for fusing into the layer that produced a fresh array ----------
#
# Bounds go through np.clip with finite scalars, never np.maximum/np.minimum with a scalar:
# NumPy 2.4 vectorises clip's scalar bounds but not a scalar operand of maximum, which
# then runs several times slower. NaN passes through.

def relu_(y: np.ndarray) -> np.ndarray:
    return np.clip(y, 0, np.inf, out=y)


def clip_(y: np.ndarray, low: float, high: float) -> np.ndarray:
    return np.clip(y, low, high, out=y)


def leaky_relu_(y: np.ndarray, negative_slope: float) -> np.ndarray:
    """max(y, slope * y) for a slope below 1, min for one above: two array operands keep
    NumPy on its vectorised loops, where a masked multiply is not."""
    scaled = y * np.asarray(negative_slope, dtype=y.dtype)
    extremum = np.maximum if negative_slope <= 1 else np.minimum
    return extremum(y, scaled, out=y)


def sigmoid_(y: np.ndarray) -> np.ndarray:
    y *= 0.5
    return _sigmoid_of_halves(y)


def silu_(y: np.ndarray) -> np.ndarray:
    """y * sigmoid(y) = h * (1 + tanh(h)) with h = y / 2: four passes over y, where the
    product with a sigmoid on a copy takes six."""
    y *= 0.5
    return _silu_of_halves(y)


def _silu_of_halves(h: np.ndarray) -> np.ndarray:
    """silu(2h) = h * (1 + tanh(h)), in place of ``h``."""
    gate = np.tanh(h)
    gate += 1
    h *= gate
    return h


def hardsigmoid_(y: np.ndarray) -> np.ndarray:
    y += 3
    np.clip(y, 0, 6, out=y)
    y /= 6
    return y


def hardswish_(y: np.ndarray) -> np.ndarray:
    gate = y + 3
    np.clip(gate, 0, 6, out=gate)
    y *= gate
    y /= 6
    return y


def gelu_(y: np.ndarray) -> np.ndarray:
    """:func:`gelu` in place: y * 0.5 * (1 + erf(y / sqrt(2)))."""
    gate = erf(y * _SQRT_HALF)
    gate += 1
    gate *= 0.5
    y *= gate
    return y


def gelu_tanh_(y: np.ndarray) -> np.ndarray:
    """:func:`gelu_tanh` in place."""
    np.copyto(y, gelu_tanh(y))
    return y


_INPLACE = {"relu": relu_, "clip": clip_, "leaky_relu": leaky_relu_, "sigmoid": sigmoid_,
            "silu": silu_, "hardsigmoid": hardsigmoid_, "hardswish": hardswish_,
            "gelu": gelu_, "gelu_tanh": gelu_tanh_}
_OF_HALVES = {"sigmoid": _sigmoid_of_halves, "silu": _silu_of_halves}
"""The activations whose first pass halves y: given y / 2, they skip it."""


@dataclass(frozen=True)
class InplaceActivation:
    """An elementwise activation applied in place: ``name`` and its float parameters.

    Calling it overwrites its argument (which must be a float array nobody else holds)
    and returns it. It is what the graph optimiser fuses into a convolution or an
    expression, and what those activation layers compute on a copy of their input.
    """

    name: str
    params: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.name not in _INPLACE:
            raise ValueError(f"unknown in-place activation {self.name!r}; known: {sorted(_INPLACE)}")

    def __call__(self, y: np.ndarray) -> np.ndarray:
        return _INPLACE[self.name](y, *self.params)

    @property
    def takes_halves(self) -> bool:
        """Whether :meth:`of_halves` saves a pass: the activation starts by halving y, so a
        producer that makes y / 2 directly (its weights and bias halved, which is exact)
        spares it."""
        return self.name in _OF_HALVES

    def of_halves(self, h: np.ndarray) -> np.ndarray:
        """The activation of ``2 * h``, in place of ``h``."""
        return _OF_HALVES[self.name](h, *self.params)


BIAS_ROW = 1024
"""Values in a row of repeated biases: NumPy adds a bias along the last axis C values per
inner loop, so for few channels the loop overhead dominates; over rows of the bias
repeated to about this length the loop overhead is paid once per row instead."""


@dataclass(frozen=True)
class Epilogue:
    """What a convolution adds to its product, in place: a bias along the last axis, then a
    fused activation. The kernels call it on each block of output pixels they finish,
    while the block is still in cache, instead of passing over the whole output twice."""

    bias: np.ndarray | None = None
    activation: InplaceActivation | None = None
    halved: bool = False
    """Whether the product (and ``bias``) are half their true values, for an activation
    that :attr:`~InplaceActivation.takes_halves`."""

    def __post_init__(self) -> None:
        if self.bias is not None:
            repeats = max(1, BIAS_ROW // len(self.bias))
            object.__setattr__(self, "_bias_row", np.tile(self.bias, repeats))

    def __call__(self, block: np.ndarray, channels: slice = slice(None)) -> None:
        """Apply to ``block``, whose last axis holds the output ``channels``."""
        if self.bias is not None:
            self._add_bias(block, channels)
        if self.halved:
            self.activation.of_halves(block)
        elif self.activation is not None:
            self.activation(block)

    def _add_bias(self, block: np.ndarray, channels: slice) -> None:
        """``block += bias``: over rows of the repeated bias where the block is whole pixels
        in one run of memory, the rest (and channel slices) one pixel at a time."""
        row = self._bias_row
        if (channels != slice(None) or len(row) == len(self.bias) or not block.flags.c_contiguous
                or block.shape[-1] != len(self.bias)):
            block += self.bias[channels]
            return
        flat = block.reshape(-1)
        whole = flat.size - flat.size % len(row)
        rows, pixels = flat[:whole].reshape(-1, len(row)), flat[whole:].reshape(-1, len(self.bias))
        rows += row
        pixels += self.bias


def product_epilogue(bias: np.ndarray | None, activation: InplaceActivation | None) -> tuple[np.float32, Epilogue]:
    """The epilogue of a product that ``bias`` and then ``activation`` follow, and the scale
    the product's weights take for it.

    An activation that starts by halving (SiLU, sigmoid) gets the product and the bias
    halved instead, which is exact and spares a pass over the output: the weights take
    the scale 0.5 and the epilogue applies the activation of halves.
    """
    halved = activation is not None and activation.takes_halves
    scale = np.float32(0.5 if halved else 1)
    if halved and bias is not None:
        bias = bias * scale
    return scale, Epilogue(bias, activation, halved)
