"""Activations as codes that compiled kernels apply to rows of values while they are in cache.

An :class:`~kuiperinfer.kernels.elementwise.InplaceActivation` (a name and its parameters)
becomes an :class:`ActivationCode`: an int and two float parameters. :func:`finish_row`
adds a bias to a row and applies the activation, with one loop per activation, so that
the branch on the code is taken once per row and LLVM vectorises each loop. Sigmoid and
SiLU go through a rational approximation of tanh (no exp, which LLVM cannot vectorise
here) whose worst error in float32 is below 1e-6 (``tools/fit_tanh.py`` fits it).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kuiperinfer.kernels.elementwise import InplaceActivation
from kuiperinfer.kernels.jit import inline

NONE, RELU, CLIP, LEAKY_RELU, SIGMOID, SILU, HARDSIGMOID, HARDSWISH = range(8)
CODES = {"relu": RELU, "clip": CLIP, "leaky_relu": LEAKY_RELU, "sigmoid": SIGMOID, "silu": SILU,
         "hardsigmoid": HARDSIGMOID, "hardswish": HARDSWISH}

TANH_CLAMP = np.float32(9.0)
"""Beyond it tanh is 1 to float32's precision."""
P1, P2, P3, P4 = (np.float32(0.1262255609035492), np.float32(0.0026063283439725637),
                  np.float32(6.512115760415327e-06), np.float32(-5.043563788831307e-09))
Q1, Q2, Q3 = np.float32(0.4595552980899811), np.float32(0.02246302179992199), np.float32(0.00018536222341936082)
HALF, ZERO, THREE, SIX = np.float32(0.5), np.float32(0), np.float32(3), np.float32(6)
SIXTH = np.float32(1 / 6)


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
def finish_row(row: np.ndarray, bias: np.ndarray, code: int, a: np.float32, b: np.float32) -> None:
    """``row = activation(row + bias)`` in place (``bias`` as long as the row). NaN stays NaN:
    comparisons with NaN are false, and the branches keep the value then."""
    n = row.shape[0]
    if code == NONE:
        for j in range(n):
            row[j] += bias[j]
    elif code == RELU:
        for j in range(n):
            v = row[j] + bias[j]
            row[j] = ZERO if v < ZERO else v
    elif code == CLIP:
        for j in range(n):
            v = row[j] + bias[j]
            row[j] = a if v < a else (b if v > b else v)
    elif code == LEAKY_RELU:
        for j in range(n):
            v = row[j] + bias[j]
            row[j] = v * a if v < ZERO else v
    elif code == SIGMOID:
        for j in range(n):
            v = row[j] + bias[j]
            row[j] = HALF + HALF * tanh(v * HALF)
    elif code == SILU:
        for j in range(n):
            v = row[j] + bias[j]
            row[j] = v * (HALF + HALF * tanh(v * HALF))
    elif code == HARDSIGMOID:
        for j in range(n):
            v = row[j] + bias[j] + THREE
            row[j] = (ZERO if v < ZERO else (SIX if v > SIX else v)) * SIXTH
    else:  # HARDSWISH
        for j in range(n):
            v = row[j] + bias[j]
            gate = v + THREE
            row[j] = v * (ZERO if gate < ZERO else (SIX if gate > SIX else gate)) * SIXTH
