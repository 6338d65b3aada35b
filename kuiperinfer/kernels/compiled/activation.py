"""Activations as codes that compiled kernels apply to rows of values while they are in cache.

An :class:`~kuiperinfer.kernels.elementwise.InplaceActivation` (a name and its parameters)
becomes an :class:`ActivationCode`: an int and two float parameters. :func:`finish_row`
adds a bias to a row and applies the activation, with one loop per activation, so that
the branch on the code is taken once per row and LLVM vectorises each loop (each loop
inlines one small function of its activation);
:func:`finish_vector` applies the piecewise linear ones to a vector of sums in registers
(:mod:`.vectors`). Sigmoid and
SiLU go through a rational approximation of tanh (no exp, which LLVM cannot vectorise
here) whose worst error in float32 is below 1e-6 (``tools/fit_tanh.py`` fits it); GELU
through one of erf (``tools/fit_erf.py``), its tanh form through the same tanh.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kuiperinfer.kernels.compiled.vectors import splat, where_above, where_below
from kuiperinfer.kernels.elementwise import InplaceActivation
from kuiperinfer.kernels.jit import inline, kernel

NONE, RELU, CLIP, LEAKY_RELU, SIGMOID, SILU, HARDSIGMOID, HARDSWISH, GELU, GELU_TANH = range(10)
CODES = {"relu": RELU, "clip": CLIP, "leaky_relu": LEAKY_RELU, "sigmoid": SIGMOID, "silu": SILU,
         "hardsigmoid": HARDSIGMOID, "hardswish": HARDSWISH, "gelu": GELU, "gelu_tanh": GELU_TANH}

TANH_CLAMP = np.float32(9.0)
"""Beyond it tanh is 1 to float32's precision."""
P1, P2, P3, P4 = (np.float32(0.1262255609035492), np.float32(0.0026063283439725637),
                  np.float32(6.512115760415327e-06), np.float32(-5.043563788831307e-09))
Q1, Q2, Q3 = np.float32(0.4595552980899811), np.float32(0.02246302179992199), np.float32(0.00018536222341936082)
HALF, ZERO, THREE, SIX = np.float32(0.5), np.float32(0), np.float32(3), np.float32(6)
SIXTH = np.float32(1 / 6)

ERF_CLAMP = np.float32(3.92)
"""Beyond it erf is 1 to float32's precision."""
ERF_P = (np.float32(1.1283820867538452), np.float32(0.36231735348701477), np.float32(0.07234510779380798),
         np.float32(0.010117738507688046), np.float32(0.0002533668011892587), np.float32(-1.4403456134459702e-06))
ERF_Q = (np.float32(0.6544416546821594), np.float32(0.182257279753685), np.float32(0.02804545871913433),
         np.float32(0.0023640035651624203))
SQRT_HALF = np.float32(0.7071067811865476)
SQRT_2_OVER_PI = np.float32(0.7978845608028654)
GELU_CUBIC = np.float32(0.044715)


class ActivationCode(NamedTuple):
    """What a compiled kernel needs to apply an activation: its code and two parameters."""

    code: int = NONE
    a: np.float32 = ZERO
    b: np.float32 = ZERO

    @classmethod
    def of(cls, activation: InplaceActivation | None) -> ActivationCode:
        if activation is None:
            return cls()
        params = (*activation.params, 0.0, 0.0)
        return cls(CODES[activation.name], np.float32(params[0]), np.float32(params[1]))


@inline
def tanh(x: np.float32) -> np.float32:
    """tanh by the rational approximation (worst error below 1e-6)."""
    x = min(max(x, -TANH_CLAMP), TANH_CLAMP)
    x2 = x * x
    p = np.float32(1) + x2 * (P1 + x2 * (P2 + x2 * (P3 + x2 * P4)))
    q = np.float32(1) + x2 * (Q1 + x2 * (Q2 + x2 * Q3))
    return min(max(x * p / q, np.float32(-1)), np.float32(1))


@inline
def erf(x: np.float32) -> np.float32:
    """erf by the rational approximation (worst error below 1e-6); exactly +-1 beyond the
    clamp, so that GELU of a large negative value is 0, not a rounding error times it."""
    c = min(max(x, -ERF_CLAMP), ERF_CLAMP)
    x2 = c * c
    p0, p1, p2, p3, p4, p5 = ERF_P
    q1, q2, q3, q4 = ERF_Q
    p = p0 + x2 * (p1 + x2 * (p2 + x2 * (p3 + x2 * (p4 + x2 * p5))))
    q = np.float32(1) + x2 * (q1 + x2 * (q2 + x2 * (q3 + x2 * q4)))
    r = min(max(c * p / q, np.float32(-1)), np.float32(1))
    return np.float32(1) if x >= ERF_CLAMP else (np.float32(-1) if x <= -ERF_CLAMP else r)


@inline
def gelu(v: np.float32) -> np.float32:
    """x * Phi(x), exact form: 0.5 * x * (1 + erf(x / sqrt(2)))."""
    return v * (HALF + HALF * erf(v * SQRT_HALF))


@inline
def gelu_tanh(v: np.float32) -> np.float32:
    """GELU's tanh approximation: the cube is of the value clamped where tanh is +-1, taken
    exactly there (so that a large negative value gives 0)."""
    c = min(max(v, -TANH_CLAMP), TANH_CLAMP)
    t = tanh(SQRT_2_OVER_PI * (c + GELU_CUBIC * c * c * c))
    t = np.float32(1) if v >= TANH_CLAMP else (np.float32(-1) if v <= -TANH_CLAMP else t)
    return v * (HALF + HALF * t)


@inline
def relu(v: np.float32) -> np.float32:
    """max(v, 0); NaN stays NaN (a comparison with NaN is false, so the value is kept), as
    in every activation here."""
    return ZERO if v < ZERO else v


@inline
def clip(v: np.float32, low: np.float32, high: np.float32) -> np.float32:
    return low if v < low else (high if v > high else v)


@inline
def leaky_relu(v: np.float32, slope: np.float32) -> np.float32:
    return v * slope if v < ZERO else v


@inline
def sigmoid(v: np.float32) -> np.float32:
    return HALF + HALF * tanh(v * HALF)


@inline
def hardsigmoid(v: np.float32) -> np.float32:
    gate = v + THREE
    return (ZERO if gate < ZERO else (SIX if gate > SIX else gate)) * SIXTH


@inline
def hardswish(v: np.float32) -> np.float32:
    gate = v + THREE
    return v * (ZERO if gate < ZERO else (SIX if gate > SIX else gate)) * SIXTH


@kernel
def finish_row(row: np.ndarray, bias: np.ndarray, code: int, a: np.float32, b: np.float32) -> None:
    """``row = activation(row + bias)`` in place (``bias`` as long as the row), one loop per
    activation, so that LLVM vectorises each. A kernel of its own that other kernels call, not
    inlined into them: Numba copies an inlined function's whole body into each caller before
    it drops the branches ruled out, and this one's ten loops, copied into every product's
    epilogue, took four fifths of the product kernels' compile time (``docs/performance.md``,
    "Compile time")."""
    n = row.shape[0]
    if code == NONE:
        for j in range(n):
            row[j] += bias[j]
    elif code == RELU:
        for j in range(n):
            row[j] = relu(row[j] + bias[j])
    elif code == CLIP:
        for j in range(n):
            row[j] = clip(row[j] + bias[j], a, b)
    elif code == LEAKY_RELU:
        for j in range(n):
            row[j] = leaky_relu(row[j] + bias[j], a)
    elif code == SIGMOID:
        for j in range(n):
            row[j] = sigmoid(row[j] + bias[j])
    elif code == SILU:
        for j in range(n):
            v = row[j] + bias[j]
            row[j] = v * sigmoid(v)
    elif code == HARDSIGMOID:
        for j in range(n):
            row[j] = hardsigmoid(row[j] + bias[j])
    elif code == HARDSWISH:
        for j in range(n):
            row[j] = hardswish(row[j] + bias[j])
    elif code == GELU:
        for j in range(n):
            row[j] = gelu(row[j] + bias[j])
    else:  # GELU_TANH
        for j in range(n):
            row[j] = gelu_tanh(row[j] + bias[j])


@inline
def in_registers(code: int) -> bool:
    """Whether :func:`finish_vector` applies the activation of ``code``: the piecewise linear
    ones (the others take :func:`finish_row` over the values stored without their bias)."""
    return code <= LEAKY_RELU or code == HARDSIGMOID or code == HARDSWISH


@inline
def finish_vector(v, code: int, a: np.float32, b: np.float32):  # noqa: ANN001, ANN201
    """``activation(v)`` of a vector of sums that hold their bias, for a code :func:`in_registers`
    takes, computed as :func:`finish_row` computes each value."""
    zero = splat(ZERO)
    if code == RELU:
        return where_below(v, zero, zero)
    if code == CLIP:
        return where_above(where_below(v, splat(a), splat(a)), splat(b), splat(b))
    if code == LEAKY_RELU:
        return where_below(v, zero, v * splat(a))
    if code == HARDSIGMOID:
        gate = v + splat(THREE)
        return where_above(where_below(gate, zero, zero), splat(SIX), splat(SIX)) * splat(SIXTH)
    if code == HARDSWISH:
        gate = v + splat(THREE)
        return v * where_above(where_below(gate, zero, zero), splat(SIX), splat(SIX)) * splat(SIXTH)
    return v
