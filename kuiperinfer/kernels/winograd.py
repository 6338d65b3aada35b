"""Winograd F(4x4, 3x3): 3x3 stride-1 convolution with 36 products per 4x4 output tile.

im2col spends 9 multiply-adds per output pixel and input channel; Winograd's minimal
filtering algorithm (Lavin & Gray, 2015) computes each 4x4 output tile from a 6x6 input
tile with 36, about 2.25 per pixel. Every step is a matrix product:

* the weight ``g`` (K, C, 3, 3) becomes ``U = G g G^T``, 36 matrices (C, K), once at
  build time;
* each 6x6 input tile ``d`` (tiles overlap by 2) becomes ``V = B^T d B``: two products
  with the 6x6 matrix ``B^T``, over all channels and tiles at once (tiles are cut from
  channels-last memory, so each tile position holds the C channels side by side);
* the 36 products ``M = V @ U`` are one batched ``np.matmul`` (36, tiles, C) @ (36, C, K),
  whose rows are output pixels with their K channels side by side: NHWC;
* each output tile is ``A^T M A``, again two products, with the 4x6 matrix ``A^T``.

The transforms add rounding error of about 1e-5 relative to the output's scale. They
are fixed costs per tile and channel, so Winograd pays only with enough tiles to share
them and only beyond a few channels: :func:`winograd_pays` decides per call.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from numpy.lib.stride_tricks import as_strided

from kuiperinfer.kernels.layout import nhwc
from kuiperinfer.kernels.parallel import run_parts, threads_for

TILE = 4
"""Output tile size; input tiles are ``TILE + 2`` wide."""
MIN_TILES = 16
"""Fewest output tiles (over the batch) for which Winograd beats im2col on this machine."""
MIN_CHANNELS = 8
"""Fewest input channels for which it does (the transforms cost per input channel)."""
BLOCK_BYTES = 1 << 20
"""Bytes of input tiles transformed at a time."""

_BT = np.array([[4, 0, -5, 0, 1, 0],
                [0, -4, -4, 1, 1, 0],
                [0, 4, -4, -1, 1, 0],
                [0, -2, -1, 2, 1, 0],
                [0, 2, -1, -2, 1, 0],
                [0, 4, 0, -5, 0, 1]], dtype=np.float32)
_G = np.array([[1 / 4, 0, 0],
               [-1 / 6, -1 / 6, -1 / 6],
               [-1 / 6, 1 / 6, -1 / 6],
               [1 / 24, 1 / 12, 1 / 6],
               [1 / 24, -1 / 12, 1 / 6],
               [0, 0, 1]], dtype=np.float64)
_AT = np.array([[1, 1, 1, 1, 1, 0],
                [0, 1, -1, 2, -2, 0],
                [0, 1, 1, 4, 4, 0],
                [0, 1, -1, 8, -8, 1]], dtype=np.float32)


def winograd_weight(weight: np.ndarray) -> np.ndarray:
    """The transformed weight ``U`` (36, C, K) of a (K, C, 3, 3) weight, computed in float64."""
    u = np.einsum("ai,kcij,bj->abck", _G, weight.astype(np.float64), _G)
    return np.ascontiguousarray(u.reshape(36, weight.shape[1], weight.shape[0]), dtype=np.float32)


def tile_counts(out_hw: tuple[int, int]) -> tuple[int, int]:
    """Output tiles along the height and width for an output of ``out_hw``."""
    return -(-out_hw[0] // TILE), -(-out_hw[1] // TILE)


def winograd_pays(batch: int, channels: int, out_hw: tuple[int, int]) -> bool:
    """Whether Winograd is the faster way to compute this convolution."""
    th, tw = tile_counts(out_hw)
    return channels >= MIN_CHANNELS and batch * th * tw >= MIN_TILES


def winograd_conv3x3(x: np.ndarray, u: np.ndarray, padding: tuple[tuple[int, int], tuple[int, int]],
                     epilogue: Callable[..., object] | None = None) -> np.ndarray:
    """3x3 stride-1 convolution of NCHW ``x`` (any memory layout) zero-padded by ``padding``,
    with ``U`` from :func:`winograd_weight`; an (N, OH, OW, K) array (NHWC). ``epilogue``
    runs in place on each block of output as it is finished.

    Large images go a block of tile rows at a time, so that the transformed tiles of a
    block stay in cache between the transforms and the products; the blocks may be
    shared among threads (:mod:`~kuiperinfer.kernels.parallel`).
    """
    n, c, h, w = x.shape
    k = u.shape[2]
    (top, bottom), (left, right) = padding
    oh, ow = h + top + bottom - 2, w + left + right - 2
    th, tw = tile_counts((oh, ow))
    # zero padding out to whole tiles, in NHWC: the extra outputs are cropped at the end
    padded = np.zeros((n, TILE * th + 2, TILE * tw + 2, c), dtype=np.float32)
    padded[:, top:top + h, left:left + w] = nhwc(x)
    s_n, s_h, s_w, s_c = padded.strides
    out = np.empty((n, th, TILE, tw, TILE, k), dtype=np.float32)
    # a block's product re-reads all of U: a large U needs many tiles per block to pay for it
    min_tiles = 16 * -(-u.nbytes // BLOCK_BYTES)
    step = max(1, BLOCK_BYTES // (36 * c * n * tw * padded.itemsize), -(-min_tiles // (n * tw)))
    work = 36 * n * th * tw * c * k
    step = min(step, -(-th // threads_for(work)))

    def transform_block(start: int) -> None:
        rows = min(step, th - start)
        tiles = as_strided(padded[:, TILE * start:], (6, 6, n, rows, tw, c),
                           (s_h, s_w, s_n, TILE * s_h, TILE * s_w, s_c), writeable=False)
        d = np.ascontiguousarray(tiles).reshape(6, -1)              # (i, j * tiles * C)
        v = np.matmul(_BT, (_BT @ d).reshape(6, 6, -1))            # (a, b, tiles * C)
        m = np.matmul(v.reshape(36, -1, c), u)                     # (36, tiles, K)
        y = np.matmul(_AT, (_AT @ m.reshape(6, -1)).reshape(4, 6, -1))  # (4, 4, tiles * K)
        y = y.reshape(TILE, TILE, n, rows, tw, k).transpose(2, 3, 0, 4, 1, 5)  # (N, rows, 4, tw, 4, K)
        target = out[:, start:start + rows]
        np.copyto(target, y)
        if epilogue is not None:
            epilogue(target)

    run_parts(range(0, th, step), work, transform_block)
    out = out.reshape(n, TILE * th, TILE * tw, k)
    return out[:, :oh, :ow]
