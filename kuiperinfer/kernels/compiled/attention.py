"""Scaled dot-product attention, ``softmax(q k^T * scale + mask) v``, compiled: both
products on the FMA register tiles of :mod:`.float_tiles`, the scaling, mask and softmax
between them on each block of scores while it is in cache.

The compiled twin of :func:`kuiperinfer.layers.attention.attention`. q, k and v are
(batch, heads, rows, depth) arrays, views with any strides but the last (a linear
layer's packed ``(N, L, 3, heads, head_dim)`` output read in place); the output goes into
``out``, which may be a view too (the heads side by side, as the next linear layer reads
them). Two steps, each shared among the run's threads as compiled parts:

1. :func:`pack_heads`: per (batch, head), k transposed and v as the tiles read B, in strips
   of :data:`LANES` columns (keys for k, value channels for v), one after another.
2. :func:`attention_blocks`: per part, a block of one head's query rows, :data:`CHUNK` at a
   time: their scores (a tile per panel of keys, the rows of q read where they are),
   ``softmax(scores * scale + mask)`` row by row, the values' product stored into ``out``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np

from kuiperinfer.kernels.compiled.float_tiles import FIRST, LAST, row_counts
from kuiperinfer.kernels.compiled.float_tiles import SHAPES as FLOAT_SHAPES
from kuiperinfer.kernels.compiled.softmax import softmax_row
from kuiperinfer.kernels.jit import AVAILABLE, inline, kernel
from kuiperinfer.kernels.parallel import PART_WORK, compiled_parts

if AVAILABLE:   # the tiles are LLVM IR for Numba: without it the layers run the NumPy attention
    from kuiperinfer.kernels.compiled.float_tiles import tile as float_tile
    from kuiperinfer.kernels.compiled.products import tile_rows

SHAPE = 1
"""The float32 tile the attention runs on (:data:`kuiperinfer.kernels.compiled.float_tiles.SHAPES`):
the 256-bit one, 6 rows by 2 strips of 8, on every CPU with AVX2 and FMA. On a Zen 4 it ran
ViT-Tiny's attention 10-20% faster than the 512-bit tile, whose 24 accumulators are set,
finished and stored for only 64 steps of the depth (docs/performance.md)."""
TILE_ROWS, STRIPS, LANES = FLOAT_SHAPES[SHAPE]
COUNTS = row_counts(TILE_ROWS)
CHUNK = 4 * TILE_ROWS
"""Query rows an attention part takes at a time: their scores (24 rows of 197 keys, 19 KiB)
stay in L1 between the two products."""
PACK_WORK = 2
"""Multiply-adds a packed value counts as in the sharing rule."""
NEG_INF, POS_INF = np.float32(-np.inf), np.float32(np.inf)


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
def pack_heads(k: np.ndarray, v: np.ndarray, packed_k: np.ndarray, packed_v: np.ndarray, first: int,
               last: int) -> None:
    """Heads ``first:last`` (``batch * heads + head``) of the (B, H, S, E) ``k`` and (B, H, S, Ev)
    ``v`` as the tiles read B: ``packed_k[i]`` k transposed as (strips of keys, E, :data:`LANES`),
    ``packed_v[i]`` v as (strips of channels, S, :data:`LANES`); the lanes past the last key or
    channel left as they are."""
    heads, n_keys, depth, value_depth = k.shape[1], k.shape[2], k.shape[3], v.shape[3]
    for i in range(first, last):
        keys, values, to_k, to_v = k[i // heads, i % heads], v[i // heads, i % heads], packed_k[i], packed_v[i]
        for j0 in range(0, n_keys, LANES):
            base = j0 * depth
            if j0 + LANES <= n_keys:   # a whole strip, the lanes a constant: vector stores
                for e in range(depth):
                    for j in range(LANES):
                        to_k[base + e * LANES + j] = keys[j0 + j, e]
            else:
                for e in range(depth):
                    for j in range(n_keys - j0):
                        to_k[base + e * LANES + j] = keys[j0 + j, e]
        for c0 in range(0, value_depth, LANES):
            base = c0 * n_keys
            if c0 + LANES <= value_depth:
                for j in range(n_keys):
                    for c in range(LANES):
                        to_v[base + j * LANES + c] = values[j, c0 + c]
            else:
                for j in range(n_keys):
                    for c in range(value_depth - c0):
                        to_v[base + j * LANES + c] = values[j, c0 + c]


@inline
def product_rows(a: np.ndarray, n: int, packed: np.ndarray, out: np.ndarray, columns: int, zeros: np.ndarray,
                 clamps: np.ndarray, no_residual: np.ndarray) -> None:
    """``out[:n, :columns] = a[:n] @ B`` (all of ``a``'s columns deep), B ``packed`` in strips
    of :data:`LANES` columns, a tile at a time."""
    strips = -(-columns // LANES)
    row = 0
    while row < n:
        rows = tile_rows(n - row, COUNTS)
        for strip in range(0, strips, STRIPS):
            count = min(STRIPS, strips - strip)
            column0 = strip * LANES
            float_tile(SHAPE, a, row, rows, 0, a.shape[1], packed, strip, count, out, column0,
                       min(columns - column0, count * LANES), zeros, clamps, no_residual, FIRST | LAST)
        row += rows


@kernel
def attention_blocks(q: np.ndarray, packed_k: np.ndarray, packed_v: np.ndarray, parts: np.ndarray, first: int,
                     last: int, mask: np.ndarray, numbers: np.ndarray, scale: np.float32, safe: int,
                     out: np.ndarray) -> None:
    """Parts ``first:last`` of ``parts`` (batch, head, first row, row past the last) of the
    attention of ``q`` over the packed keys and values (:func:`pack_heads`) into ``out``;
    ``numbers`` holds the mask's (batch, head, row, column) strides, the keys and whether
    there is a mask."""
    heads, n_keys, value_depth = q.shape[1], numbers[4], out.shape[3]
    scores = np.empty((CHUNK, n_keys), np.float32)
    zeros = np.zeros(-(-max(n_keys, value_depth) // LANES) * LANES, np.float32)
    clamps = np.array([NEG_INF, POS_INF, NEG_INF, POS_INF], np.float32)   # no clamp
    no_residual = np.zeros((1, 1), np.float32)
    for part in range(first, last):
        b, h, r0, r1 = parts[part, 0], parts[part, 1], parts[part, 2], parts[part, 3]
        keys, values = packed_k[b * heads + h], packed_v[b * heads + h]
        for c0 in range(r0, r1, CHUNK):
            n = min(CHUNK, r1 - c0)
            rows_q, rows_out = q[b, h, c0:c0 + n], out[b, h, c0:c0 + n]
            product_rows(rows_q, n, keys, scores, n_keys, zeros, clamps, no_residual)
            for i in range(n):
                line = scores[i]
                if numbers[5]:
                    m = b * numbers[0] + h * numbers[1] + (c0 + i) * numbers[2]
                    for j in range(n_keys):
                        line[j] = line[j] * scale + mask[m + j * numbers[3]]
                else:
                    for j in range(n_keys):
                        line[j] *= scale
                softmax_row(line, safe)
            product_rows(scores, n, values, rows_out, value_depth, zeros, clamps, no_residual)


@lru_cache(maxsize=64)
def _parts(batch: int, heads: int, n_queries: int, step: int) -> np.ndarray:
    """Blocks of ``step`` query rows of every head, as (batch, head, first row, row past the last)."""
    return np.array([(b, h, r, min(r + step, n_queries)) for b in range(batch) for h in range(heads)
                     for r in range(0, n_queries, step)], np.int64).reshape(-1, 4)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, out: np.ndarray, mask: Mask | None,
              scale: float, safe: bool) -> None:
    """``out = softmax(q k^T * scale + mask) v`` for q (B, H, L, E), k (B, H, S, E), v (B, H, S, Ev)
    and out (B, H, L, Ev), all float32 with contiguous last dimensions. Only a CPU with AVX2
    and FMA runs it (:func:`kuiperinfer.layers.attention.attention_compiles`). A query whose
    keys are all masked with -inf gets zeros when ``safe``, NaN otherwise."""
    batch, heads, n_queries, depth = q.shape
    n_keys, value_depth = k.shape[2], v.shape[3]
    packed_k = np.empty((batch * heads, -(-n_keys // LANES) * depth * LANES), np.float32)
    packed_v = np.empty((batch * heads, -(-value_depth // LANES) * n_keys * LANES), np.float32)
    compiled_parts(pack_heads).run(batch * heads, (packed_k.size + packed_v.size) * PACK_WORK,
                                   (k, v, packed_k, packed_v), ())
    per_row = n_keys * (depth + value_depth)
    step = CHUNK * max(1, -(-PART_WORK // (per_row * CHUNK)))
    m = mask or NO_MASK
    numbers = np.array([m.batch, m.head, m.row, m.column, n_keys, int(mask is not None)], np.int64)
    compiled_parts(attention_blocks).run(batch * heads * -(-n_queries // step), batch * heads * n_queries * per_row,
                                         (q, packed_k, packed_v, _parts(batch, heads, n_queries, step)),
                                         (m.values, numbers, np.float32(scale), int(safe), out))
