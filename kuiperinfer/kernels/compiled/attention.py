"""Scaled dot-product attention: ``softmax(q k^T * scale + mask) v``, its scaling, mask and
softmax compiled in one pass over the scores between two BLAS products.

The compiled twin of :func:`kuiperinfer.layers.attention.attention`. q, k and v are
(batch, heads, rows, depth) arrays, views with any strides but the last (a linear
layer's packed ``(N, L, 3, heads, head_dim)`` output read in place); the output goes into
``out``, which may be a view too (the heads side by side, as the next linear layer reads
them). Work is cut into parts of (batch, heads, query rows) that the engine's threads
share when it is large enough: each part multiplies, applies :func:`scale_mask_softmax`
to its scores while they are in cache, and multiplies by the values.

Hand-written products (k transposed, four query rows at a time) vectorise but reach
a third of BLAS's rate at ViT-Tiny's sizes and half at MiniLM's (docs/performance.md).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kuiperinfer.kernels.compiled.softmax import softmax_row
from kuiperinfer.kernels.jit import kernel
from kuiperinfer.kernels.parallel import run_parts, threads_for

PART_MACS = 1 << 21
"""Multiply-adds a part holds at least when the threads share the work: a hand-off to a
helper thread costs tens of microseconds."""
PARTS_PER_THREAD = 3


class Mask(NamedTuple):
    """An additive mask as the kernel reads it: the flat values and the strides (in values)
    of (batch, head, row, column), 0 along the dimensions it broadcasts over."""

    values: np.ndarray
    batch: int
    head: int
    row: int
    column: int

    @classmethod
    def of(cls, mask: np.ndarray) -> Mask:
        """From a float mask broadcastable to (batch, heads, queries, keys)."""
        mask = np.asarray(mask, np.float32)
        mask = np.array(mask.reshape((1,) * (4 - mask.ndim) + mask.shape), np.float32, order="C")
        strides = [0 if n == 1 else s // 4 for n, s in zip(mask.shape, mask.strides)]
        return cls(mask.reshape(-1), *strides)


NO_MASK = Mask(np.zeros(1, np.float32), 0, 0, 0, 0)


@kernel
def scale_mask_softmax(scores: np.ndarray, scale: np.float32, mask: np.ndarray, has_mask: int, start: int,
                       head_stride: int, row_stride: int, column_stride: int, safe: int) -> None:
    """``scores = softmax(scores * scale + mask)`` over the rows of the (H, R, S) ``scores``,
    the mask of head ``h`` and row ``i`` starting at ``start + h * head_stride + i * row_stride``."""
    for h in range(scores.shape[0]):
        for i in range(scores.shape[1]):
            row = scores[h, i]
            if has_mask:
                m = start + h * head_stride + i * row_stride
                for j in range(row.shape[0]):
                    row[j] = row[j] * scale + mask[m + j * column_stride]
            else:
                for j in range(row.shape[0]):
                    row[j] *= scale
            softmax_row(row, safe)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, out: np.ndarray, mask: Mask | None,
              scale: float, safe: bool) -> None:
    """``out = softmax(q k^T * scale + mask) v`` for q (B, H, L, E), k (B, H, S, E), v (B, H, S, Ev)
    and out (B, H, L, Ev), all float32 with contiguous last dimensions. A query whose keys are
    all masked with -inf gets zeros when ``safe``, NaN otherwise."""
    batch, heads, n_queries, depth = q.shape
    n_keys = k.shape[2]
    kt = np.swapaxes(k, -1, -2)
    m = mask or NO_MASK
    scale32 = np.float32(scale)
    per_row = n_keys * (depth + v.shape[3])
    work = batch * heads * n_queries * per_row
    threads = threads_for(work)
    if threads < 2 and batch == 1:
        parts = [(0, 0, heads, 0, n_queries)]
    elif threads < 2:
        parts = [(b, 0, heads, 0, n_queries) for b in range(batch)]
    else:
        per_part = max(PART_MACS // per_row, -(-work // (threads * PARTS_PER_THREAD * per_row)))
        if per_part >= heads * n_queries:      # whole samples per part
            parts = [(b, 0, heads, 0, n_queries) for b in range(batch)]
        elif per_part >= n_queries:            # whole heads
            step = per_part // n_queries
            parts = [(b, h, min(h + step, heads), 0, n_queries) for b in range(batch) for h in range(0, heads, step)]
        else:                                  # blocks of query rows of one head
            parts = [(b, h, h + 1, r, min(r + per_part, n_queries))
                     for b in range(batch) for h in range(heads) for r in range(0, n_queries, per_part)]

    def run(part: tuple[int, int, int, int, int]) -> None:
        b, h0, h1, r0, r1 = part
        scores = np.matmul(q[b, h0:h1, r0:r1], kt[b, h0:h1])
        scale_mask_softmax(scores, scale32, m.values, int(mask is not None), b * m.batch + h0 * m.head + r0 * m.row,
                           m.head, m.row, m.column, int(safe))
        np.matmul(scores, v[b, h0:h1], out=out[b, h0:h1, r0:r1])

    run_parts(parts, work, run)
