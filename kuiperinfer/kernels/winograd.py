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

from collections.abc import Callable

import numpy as np
from numpy.lib.stride_tricks import as_strided

from kuiperinfer.kernels.layout import pad_nhwc
from kuiperinfer.kernels.parallel import even_step, run_parts, threads_for

TILE = 4
"""Output tile size; input tiles are ``TILE + 2`` wide."""
MIN_TILES = 16
"""Fewest output tiles (over the batch) for which Winograd beats im2col."""
MIN_CHANNELS = 8
"""Fewest input channels for which it does (the transforms cost per input channel)."""
BLOCK_BYTES = 1 << 20
"""Bytes of input tiles transformed at a time."""
CHANNELS_PER_TILE = 4
"""Output channels per tile from which threads share a convolution's output channels rather
than its tiles: with few tiles the transformed weight U is the large operand, which every
thread would otherwise read whole."""

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


TRANSFORM_BYTES = 16 << 20
"""Bytes of float64 transformed weight computed at a time by :func:`winograd_weight` (the
whole at once would need 8 times the weight's size)."""


def winograd_weight(weight: np.ndarray) -> np.ndarray:
    """The transformed weight ``U`` (36, C, K) of a (K, C, 3, 3) weight, computed in float64
    a block of output channels at a time."""
    k, c = weight.shape[:2]
    u = np.empty((6, 6, c, k), dtype=np.float32)
    step = max(1, TRANSFORM_BYTES // (36 * c * 8))
    for start in range(0, k, step):
        block = weight[start:start + step].astype(np.float64)
        u[..., start:start + step] = np.einsum("ai,kcij,bj->abck", _G, block, _G)
    return u.reshape(36, c, k)


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
    shared among threads (:mod:`~kuiperinfer.kernels.parallel`). With few tiles for the
    output channels (:data:`CHANNELS_PER_TILE`) the threads share the output channels
    instead, each reading its part of ``U`` rather than all of it.
    """
    n, c, h, w = x.shape
    k = u.shape[2]
    (top, bottom), (left, right) = padding
    oh, ow = h + top + bottom - 2, w + left + right - 2
    th, tw = tile_counts((oh, ow))
    # zero padding out to whole tiles, in NHWC: the extra outputs are cropped at the end
    padded = pad_nhwc(x, ((top, TILE * th + 2 - h - top), (left, TILE * tw + 2 - w - left)))
    out = np.empty((n, th, TILE, tw, TILE, k), dtype=np.float32)
    work = 36 * n * th * tw * c * k
    threads = threads_for(work)
    if threads > 1 and n * th * tw * CHANNELS_PER_TILE <= k:
        v = _transform_input(padded, 0, th, tw)

        def multiply_channels(channels: slice) -> None:
            _finish(np.matmul(v, u[:, :, channels]), out[..., channels], epilogue, channels)

        run_parts([slice(k * i // threads, k * (i + 1) // threads) for i in range(threads)], work,
                  multiply_channels)
    else:
        # a block's product re-reads all of U: a large U needs many tiles per block to pay for it
        min_tiles = 16 * -(-u.nbytes // BLOCK_BYTES)
        step = max(BLOCK_BYTES // (36 * c * n * tw * padded.itemsize), -(-min_tiles // (n * tw)))
        step = even_step(th, step, threads)

        def multiply_block(start: int) -> None:
            rows = min(step, th - start)
            _finish(np.matmul(_transform_input(padded, start, rows, tw), u), out[:, start:start + rows], epilogue)

        run_parts(range(0, th, step), work, multiply_block)
    out = out.reshape(n, TILE * th, TILE * tw, k)
    return out[:, :oh, :ow]


def _transform_input(padded: np.ndarray, start: int, rows: int, tw: int) -> np.ndarray:
    """``V = B^T d B`` of the input tiles of tile rows [start, start + rows): (36, tiles, C)."""
    n, _, _, c = padded.shape
    s_n, s_h, s_w, s_c = padded.strides
    tiles = as_strided(padded[:, TILE * start:], (6, 6, n, rows, tw, c),
                       (s_h, s_w, s_n, TILE * s_h, TILE * s_w, s_c), writeable=False)
    d = np.ascontiguousarray(tiles).reshape(6, -1)              # (i, j * tiles * C)
    v = np.matmul(_BT, (_BT @ d).reshape(6, 6, -1))            # (a, b, tiles * C)
    return v.reshape(36, -1, c)


def _finish(m: np.ndarray, target: np.ndarray, epilogue: Callable[..., object] | None,
            channels: slice = slice(None)) -> None:
    """The output tiles ``A^T M A`` of the products ``m`` (36, tiles, K') into ``target``
    (N, rows, 4, tw, 4, K'), then the epilogue of those ``channels``."""
    n, rows, _, tw, _, k = target.shape
    y = np.matmul(_AT, (_AT @ m.reshape(6, -1)).reshape(4, 6, -1))  # (4, 4, tiles * K')
    np.copyto(target, y.reshape(TILE, TILE, n, rows, tw, k).transpose(2, 3, 0, 4, 1, 5))
    if epilogue is not None:
        epilogue(target, channels)
