"""Softmax along rows, compiled: the standalone F.softmax over the last dimension, and the
row function the attention kernel applies to its scores.

``exp`` goes through :func:`exp_nonpositive`, a Cody-Waite reduction and Cephes' degree-5
polynomial for exp on [-ln2/2, ln2/2], scaled by 2^n whose float32 bits are made from the
integer n (:func:`float_from_bits`): LLVM vectorises it, where it cannot vectorise
``math.exp`` here. Softmax only ever exponentiates ``x - max <= 0``; below 2^-125 a term is
0 (to float32's precision beside the maximum's 1 long before).
"""

from __future__ import annotations

import numpy as np

from kuiperinfer.kernels.jit import AVAILABLE, inline, kernel

LOG2E = np.float32(1.4426950408889634)
LN2_HIGH, LN2_LOW = np.float32(0.693359375), np.float32(-2.12194440e-4)
"""ln 2 in two parts, the first exact in few bits, so that ``x - n ln2`` loses nothing."""
EXP_P = (np.float32(1.9875691500e-4), np.float32(1.3981999507e-3), np.float32(8.3334519073e-3),
         np.float32(4.1665795894e-2), np.float32(1.6666665459e-1), np.float32(5.0000001201e-1))
LOWEST_POWER = np.float32(-125)
"""The smallest power of two :func:`exp_nonpositive` scales by: the result stays a normal
float32 (no denormals, which some CPUs compute slowly)."""
EXPONENT_BIAS, MANTISSA_BITS = np.int32(127), np.int32(23)
ONE, ZERO, HALF = np.float32(1), np.float32(0), np.float32(0.5)
NEG_INF = np.float32(-np.inf)

if AVAILABLE:
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    @intrinsic
    def float_from_bits(typingctx, bits):  # noqa: ANN001, ANN201
        """The float32 whose bits are the int32 ``bits`` (one LLVM bitcast, vectorised with its loop)."""
        if bits != types.int32:
            return None
        return types.float32(types.int32), lambda context, builder, signature, args: builder.bitcast(
            args[0], ir.FloatType())
else:
    def float_from_bits(bits: np.int32) -> np.float32:
        """The float32 whose bits are the int32 ``bits``."""
        return np.array(bits, np.int32).view(np.float32)[()]


@inline
def exp_nonpositive(x: np.float32) -> np.float32:
    """exp(x) for x <= 0 (relative error about 1e-7; 0 below exp(-86.6); NaN stays NaN)."""
    t = max(x * LOG2E, LOWEST_POWER)
    n = np.floor(t + HALF)
    r = x - n * LN2_HIGH
    r = r - n * LN2_LOW
    p0, p1, p2, p3, p4, p5 = EXP_P
    p = ((((p0 * r + p1) * r + p2) * r + p3) * r + p4) * r + p5
    e = p * r * r + r + ONE
    power = float_from_bits(np.int32((np.int32(n) + EXPONENT_BIAS) << MANTISSA_BITS))
    return ZERO if t <= LOWEST_POWER else e * power


@inline
def row_max(row: np.ndarray) -> np.float32:
    """The largest value of a row, over eight running maxima that LLVM keeps in one vector
    register (a single running maximum is a chain it cannot vectorise without reordering)."""
    n = row.shape[0]
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = NEG_INF
    whole = n - n % 8
    for j in range(0, whole, 8):
        m0, m1, m2, m3 = max(m0, row[j]), max(m1, row[j + 1]), max(m2, row[j + 2]), max(m3, row[j + 3])
        m4, m5, m6, m7 = max(m4, row[j + 4]), max(m5, row[j + 5]), max(m6, row[j + 6]), max(m7, row[j + 7])
    for j in range(whole, n):
        m0 = max(m0, row[j])
    return max(max(max(m0, m1), max(m2, m3)), max(max(m4, m5), max(m6, m7)))


@inline
def row_sum(row: np.ndarray) -> np.float32:
    """The sum of a row, over eight running sums (see :func:`row_max`)."""
    n = row.shape[0]
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = ZERO
    whole = n - n % 8
    for j in range(0, whole, 8):
        s0, s1, s2, s3 = s0 + row[j], s1 + row[j + 1], s2 + row[j + 2], s3 + row[j + 3]
        s4, s5, s6, s7 = s4 + row[j + 4], s5 + row[j + 5], s6 + row[j + 6], s7 + row[j + 7]
    for j in range(whole, n):
        s0 += row[j]
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))


@inline
def softmax_row(row: np.ndarray, safe: int) -> None:
    """``row = softmax(row)`` in place. A row of -inf only (every key masked) becomes zeros
    when ``safe`` (PyTorch's attention kernels), NaN otherwise (as F.softmax)."""
    n = row.shape[0]
    top = row_max(row)
    if top == NEG_INF:
        fill = ZERO if safe else np.float32(np.nan)
        for j in range(n):
            row[j] = fill
        return
    for j in range(n):
        row[j] = exp_nonpositive(row[j] - top)
    inverse = ONE / row_sum(row)
    for j in range(n):
        row[j] *= inverse


@kernel
def softmax_rows(x: np.ndarray, out: np.ndarray) -> None:
    """``out = softmax(x)`` along the rows of the (P, K) ``x`` (``out`` may be ``x``)."""
    for i in range(x.shape[0]):
        row = out[i]
        row[:] = x[i]
        softmax_row(row, 0)
