"""Layer normalisation over the last dimension, compiled, with the residual addition before it.

:func:`layer_norm_rows` is the compiled twin of ``affine(standardize(x, -1, eps), weight,
bias)`` (:mod:`kuiperinfer.layers.normalization`) on the rows of a (P, C) array: one pass
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
                    bias: np.ndarray, eps: np.float32, add: int) -> None:
    """``out = (y - mean) / sqrt(var + eps) * weight + bias`` over each row of the (P, C) ``y``:
    ``x``, or with ``add`` ``total = x + residual`` (all (P, C); ``total`` may be ``x``)."""
    n = x.shape[1]
    for i in range(x.shape[0]):
        row = x[i]
        if add:
            row = total[i]
            other, first = residual[i], x[i]
            for j in range(n):
                row[j] = first[j] + other[j]
        shift = row[0]
        s, q = shifted_moments(row, shift)
        mean_shifted = s / np.float32(n)
        var = max(q / np.float32(n) - mean_shifted * mean_shifted, ZERO)
        inv = ONE / np.sqrt(var + eps)
        center = shift + mean_shifted
        target = out[i]
        for j in range(n):
            target[j] = (row[j] - center) * inv * weight[j] + bias[j]
