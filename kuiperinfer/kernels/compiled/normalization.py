"""Layer normalisation over the last dimension, compiled, with the residual addition before it.

:func:`layer_norm_rows` is the compiled twin of ``affine(standardize(x, -1, eps), weight,
bias)`` (:mod:`kuiperinfer.layers.normalization`) on blocks of the rows of a (P, C) array
(:func:`layer_norm` shares the blocks among the run's threads): one pass
for the mean and variance of a row, one for the normalised, scaled and shifted values.
With ``add`` it first adds a residual row and keeps the sum, which a pre-norm transformer
also reads (``x = x + attention(...)``; ``norm(x)``).

The moments are taken of the row shifted by its first value (the variance as the mean
square less the squared mean of the shifted row, exact for any shift), which keeps
the subtraction from cancelling for rows whose mean is large beside their spread; eight
running sums let LLVM vectorise them.
"""

from __future__ import annotations

import numpy as np

from kuiperinfer.kernels.jit import inline, kernel
from kuiperinfer.kernels.parallel import PART_WORK, compiled_parts

ZERO, ONE = np.float32(0), np.float32(1)


@inline
def shifted_moments(row: np.ndarray, shift: np.float32) -> tuple[np.float32, np.float32]:
    """The sums of ``row - shift`` and of its squares."""
    n = row.shape[0]
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = ZERO
    q0 = q1 = q2 = q3 = q4 = q5 = q6 = q7 = ZERO
    whole = n - n % 8
    for j in range(0, whole, 8):
        d0, d1, d2, d3 = row[j] - shift, row[j + 1] - shift, row[j + 2] - shift, row[j + 3] - shift
        d4, d5, d6, d7 = row[j + 4] - shift, row[j + 5] - shift, row[j + 6] - shift, row[j + 7] - shift
        s0, s1, s2, s3, s4, s5, s6, s7 = s0 + d0, s1 + d1, s2 + d2, s3 + d3, s4 + d4, s5 + d5, s6 + d6, s7 + d7
        q0, q1, q2, q3 = q0 + d0 * d0, q1 + d1 * d1, q2 + d2 * d2, q3 + d3 * d3
        q4, q5, q6, q7 = q4 + d4 * d4, q5 + d5 * d5, q6 + d6 * d6, q7 + d7 * d7
    for j in range(whole, n):
        d = row[j] - shift
        s0 += d
        q0 += d * d
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)), ((q0 + q1) + (q2 + q3)) + ((q4 + q5) + (q6 + q7))


@kernel
def layer_norm_rows(x: np.ndarray, residual: np.ndarray, total: np.ndarray, out: np.ndarray, weight: np.ndarray,
                    bias: np.ndarray, eps: np.float32, add: int, step: int, first: int, last: int) -> None:
    """``out = (y - mean) / sqrt(var + eps) * weight + bias`` over each row of the (P, C) ``y``:
    ``x``, or with ``add`` ``total = x + residual`` (all (P, C); ``total`` may be ``x``), for
    the blocks of ``step`` rows ``first:last``."""
    n = x.shape[1]
    for i in range(first * step, min(last * step, x.shape[0])):
        row = x[i]
        if add:
            row = total[i]
            other, source = residual[i], x[i]
            for j in range(n):
                row[j] = source[j] + other[j]
        shift = row[0]
        s, q = shifted_moments(row, shift)
        mean_shifted = s / np.float32(n)
        var = max(q / np.float32(n) - mean_shifted * mean_shifted, ZERO)
        inv = ONE / np.sqrt(var + eps)
        center = shift + mean_shifted
        target = out[i]
        for j in range(n):
            target[j] = (row[j] - center) * inv * weight[j] + bias[j]


NORM_WORK = 16
"""Multiply-adds a normalised value counts as in the sharing rule: a row of ViT-Tiny's 192
values takes about as long as 3,000 multiply-adds of a product."""
MAX_PARTS = 8
"""Blocks of rows a normalisation is cut into at most."""


def layer_norm(x: np.ndarray, residual: np.ndarray, total: np.ndarray, out: np.ndarray, weight: np.ndarray,
               bias: np.ndarray, eps: np.float32, add: int) -> None:
    """:func:`layer_norm_rows` over every row, in blocks the run's threads share (each writes
    the rows it reads: the residual sum and the output of a block stay in its core's cache)."""
    rows, work = x.shape[0], x.size * NORM_WORK
    step = -(-rows // max(1, min(work // PART_WORK, rows, MAX_PARTS)))
    compiled_parts(layer_norm_rows).run(-(-rows // step), work, (x, residual, total, out, weight, bias, eps, add, step),
                                        ())
