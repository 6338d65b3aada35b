"""Winograd F(4x4, 3x3) compiled: the transforms in vector registers, the 36 products on
the float32 FMA tiles, the epilogue fused into the output transform.

The compiled twin of :func:`kuiperinfer.kernels.winograd.winograd_conv3x3` (the NumPy
reference, whose docstring has the algorithm). A part of a call is a block of output tiles
and a block of output channels; for its tiles, in one compiled call:

* the input transform ``V = B^T d B`` reads each tile's 6x6 window where it lies in the
  channels-last input, :data:`~.vectors.LANES` channels at a time (taps in the padding read
  as zeros, no padded copy), and writes V (36, tiles, C) into the thread's scratch;
* the 36 products ``M = V U`` run on the float32 tiles (:data:`~.products.BLOCKS`, handed
  in by address), each of a transformed weight packed once at load, into M (36, tiles, K');
* the output transform ``A^T M A`` adds the bias, applies the activation and adds the
  residual while the values are in registers, and stores the tile's pixels that lie in the
  output (a piecewise-linear activation in registers, any other over the stored pixels).

The parts are the same on any number of threads, and so are the numbers: each output's
sums do not depend on how the tiles and channels are cut.
"""

from __future__ import annotations

import numpy as np

from kuiperinfer.kernels.compiled.activation import finish_row, finish_vector, in_registers
from kuiperinfer.kernels.compiled.vectors import LANES, load, load_if, load_strided, splat, store, store_strided
from kuiperinfer.kernels.jit import AVAILABLE, inline, kernel
from kuiperinfer.kernels.winograd import TILE

if AVAILABLE:
    from kuiperinfer.kernels.jit import function_at



@inline
def input_rows(d0, d1, d2, d3, d4, d5):  # noqa: ANN001, ANN201
    """``B^T`` times six vectors (one per row of a tile's column, or per column of its row)."""
    two, four, five = splat(2), splat(4), splat(5)
    return (four * d0 - five * d2 + d4,
            (d3 + d4) - four * (d1 + d2),
            (d4 - d3) + four * (d1 - d2),
            (d4 - d2) + two * (d3 - d1),
            (d4 - d2) - two * (d3 - d1),
            four * d1 - five * d3 + d5)


@inline
def output_rows(m0, m1, m2, m3, m4, m5):  # noqa: ANN001, ANN201
    """``A^T`` times six vectors: four."""
    sum12, difference12, sum34, difference34 = m1 + m2, m1 - m2, m3 + m4, m3 - m4
    return (m0 + sum12 + sum34,
            difference12 + splat(2) * difference34,
            sum12 + splat(4) * sum34,
            difference12 + splat(8) * difference34 + m5)


@inline
def tile_at(g: int, tiles_hw: tuple[int, int]) -> tuple[int, int, int]:
    """The image, tile row and tile column of tile ``g`` of the images' tiles in order."""
    th, tw = tiles_hw
    return g // (th * tw), g % (th * tw) // tw, g % tw


@inline
def transform_inputs(x: np.ndarray, t0: int, tiles: int, tiles_hw: tuple[int, int], top_left: tuple[int, int],
                     v: np.ndarray, rows: np.ndarray) -> None:
    """``V = B^T d B`` of tiles ``t0:t0 + tiles`` of the NHWC ``x`` (padded by ``top_left``
    before its first row and column) into ``v`` (36, ``tiles``, C) flat; ``rows`` holds a
    window's rows transformed (36 vectors)."""
    _, h, w, c = x.shape
    flat = x.reshape(-1)
    for t in range(tiles):
        image, ty, tx = tile_at(t0 + t, tiles_hw)
        y0, x0 = TILE * ty - top_left[0], TILE * tx - top_left[1]
        inside = (0 <= x0 < w, 0 <= x0 + 1 < w, 0 <= x0 + 2 < w, 0 <= x0 + 3 < w, 0 <= x0 + 4 < w,
                  0 <= x0 + 5 < w)
        for c0 in range(0, c, LANES):
            count = min(LANES, c - c0)
            for i in range(6):
                row = 0 <= y0 + i < h
                at = ((image * h + y0 + i) * w + x0) * c + c0
                store_strided(rows, i * 6 * LANES, LANES, input_rows(
                    load_if(flat, at, count, row and inside[0]), load_if(flat, at + c, count, row and inside[1]),
                    load_if(flat, at + 2 * c, count, row and inside[2]),
                    load_if(flat, at + 3 * c, count, row and inside[3]),
                    load_if(flat, at + 4 * c, count, row and inside[4]),
                    load_if(flat, at + 5 * c, count, row and inside[5])), None)
            for j in range(6):
                d = load_strided(rows, j * LANES, 6 * LANES, 6, None)
                store_strided(v, (t * 36 + j) * c + c0, 6 * c, input_rows(d[0], d[1], d[2], d[3], d[4], d[5]), count)


@inline
def transform_outputs(m: np.ndarray, t0: int, tiles: int, tiles_hw: tuple[int, int], width: int, out: np.ndarray,
                      column0: int, bias: np.ndarray, residual: np.ndarray, codes: np.ndarray, limits: np.ndarray,
                      fused: bool, rows: np.ndarray) -> None:
    """``A^T M A`` of tiles ``t0:t0 + tiles`` of ``m`` (36, ``tiles``, ``width``) flat, the
    pixels that lie in the NHWC ``out`` (N, OH, OW, K) stored from channel ``column0`` on;
    where ``fused``, with the bias, activation and residual (:data:`codes` and ``limits``: the
    activation's, then the residual's) applied in registers, else as the sums are."""
    _, oh, ow, k = out.shape
    flat, added = out.reshape(-1), residual.reshape(-1)
    code, low, high = codes[0], limits[0], limits[1]
    residual_code, residual_low, residual_high = codes[1], limits[2], limits[3]
    adds = residual.size > 0
    for t in range(tiles):
        image, ty, tx = tile_at(t0 + t, tiles_hw)
        oy, ox = TILE * ty, TILE * tx
        for k0 in range(0, width, LANES):
            count = min(LANES, width - k0)
            for a in range(6):
                six = load_strided(m, (t * 36 + a * 6) * width + k0, width, 6, count)
                store_strided(rows, a * 4 * LANES, LANES, output_rows(six[0], six[1], six[2], six[3], six[4], six[5]),
                              None)
            for j in range(TILE):
                six = load_strided(rows, j * LANES, 4 * LANES, 6, None)
                column = output_rows(six[0], six[1], six[2], six[3], six[4], six[5])
                for i in range(TILE):
                    if oy + i < oh and ox + j < ow:
                        at = ((image * oh + oy + i) * ow + ox + j) * k + column0 + k0
                        value = column[i]
                        if fused:
                            value = finish_vector(value + load(bias, column0 + k0, count), code, low, high)
                            if adds:
                                value = finish_vector(value + load(added, at, count), residual_code, residual_low,
                                                      residual_high)
                        store(flat, at, value, count)


@inline
def finish_pixels(out: np.ndarray, t0: int, tiles: int, tiles_hw: tuple[int, int], column0: int, width: int,
                  bias: np.ndarray, residual: np.ndarray, codes: np.ndarray, limits: np.ndarray) -> None:
    """The bias, activation and residual of the stored pixels of tiles ``t0:t0 + tiles``, where
    they do not apply in registers (:func:`transform_outputs`)."""
    _, oh, ow, k = out.shape
    flat, added = out.reshape(-1), residual.reshape(-1)
    channels = bias[column0:column0 + width]
    for t in range(tiles):
        image, ty, tx = tile_at(t0 + t, tiles_hw)
        oy, ox = TILE * ty, TILE * tx
        for i in range(min(TILE, oh - oy)):
            for j in range(min(TILE, ow - ox)):
                at = ((image * oh + oy + i) * ow + ox + j) * k + column0
                finish_row(flat[at:at + width], channels, codes[0], limits[0], limits[1])
                if residual.size:
                    finish_row(flat[at:at + width], added[at:at + width], codes[1], limits[2], limits[3])


@kernel
def run_winograd_parts(product_at, product_type, x, packed, table, tiles_hw, top_left, out, bias, residual,  # noqa: ANN001
                   codes, limits, zeros, plain, buffers, slot, thread, first, last) -> None:
    """Parts ``first:last`` of a Winograd convolution, as the pool's threads take them
    (:class:`~kuiperinfer.kernels.parallel.CompiledParts`): each row of ``table`` (first and
    stop tile, over the images' tiles in order; first and stop strip of output channels) is
    transformed, multiplied by the 36 ``packed`` weights through the float32 tiles' product
    at ``product_at`` (its bias ``zeros``, its epilogue numbers ``plain``) and transformed
    back into ``out`` with the ``bias``, activations (``codes``, ``limits``) and ``residual``
    (empty: none), through thread ``thread``'s ``slot`` values of ``buffers``."""
    product = function_at(product_at, product_type)
    c = x.shape[3]
    fused = in_registers(codes[0]) and (residual.size == 0 or in_registers(codes[1]))
    one, none = np.empty((1, 4), np.int64), np.empty((0, 0), np.float32)
    for part in range(first, last):
        t0, t1, column0, column1, strip0, strip1 = table[part]
        tiles, width = t1 - t0, column1 - column0
        memory = buffers[thread * slot:(thread + 1) * slot]
        rows = memory[:36 * LANES]
        v_flat = memory[36 * LANES:36 * LANES + 36 * tiles * c]
        m_flat = memory[36 * LANES + 36 * tiles * c:36 * LANES + 36 * tiles * (c + width)]
        transform_inputs(x, t0, tiles, tiles_hw, top_left, v_flat, rows)
        v, m = v_flat.reshape((tiles, 36, c)), m_flat.reshape((tiles, 36, width))
        one[0, 0], one[0, 1], one[0, 2], one[0, 3] = 0, tiles, strip0, strip1
        for p in range(36):
            product(v[:, p], packed[p], one, 0, 1, (column0, column1), zeros, none, m[:, p], plain)
        transform_outputs(m_flat, t0, tiles, tiles_hw, width, out, column0, bias, residual, codes, limits, fused,
                          rows)
        if not fused:
            finish_pixels(out, t0, tiles, tiles_hw, column0, width, bias, residual, codes, limits)
