"""Direct convolution of an input of few channels (an RGB image: a network's stem), bias
and activation applied while each output pixel is in registers.

The compiled twin of :func:`kuiperinfer.kernels.im2col.planar_conv2d` for zero padding. A
stem has too few input channels for a product to pay: its columns (27 values a pixel for
a 3x3 kernel on RGB) cost as much to make as to multiply. Here, as in XNNPACK's and MLAS's
convolutions of few channels, the input is read where it lies: for each output row and
block of :data:`~.vectors.LANES` output channels, :data:`TILE` output pixels at a time
sum, over the weight's rows (channel, tap row, tap column), each pixel's input value
repeated in every lane times the row's vector of output channels (one multiply-add for
``LANES`` output channels), in as many accumulators as pixels. Where each input value
lies is an offset from the window's corner, one per weight row, computed once per input
size. Pixels whose windows reach into the padding (the borders) take the weight rows
inside the image only, one pixel at a time.

:class:`CompiledDirect` shares the output rows of its calls among the run's threads in
bands whose size depends on the work only, so the numbers are the same on any number of
threads.
"""

from __future__ import annotations

import numpy as np

from kuiperinfer.kernels.compiled.activation import finish_row, finish_vector, in_registers
from kuiperinfer.kernels.compiled.epilogue import CompiledEpilogue
from kuiperinfer.kernels.compiled.vectors import LANES, load, load_splat, multiply_add, splat, store
from kuiperinfer.kernels.jit import empty, inline, kernel, kernel_array
from kuiperinfer.kernels.parallel import run_parts

MAX_CHANNELS = 4
"""Input channels up to which a convolution computes directly (RGB, or RGB and depth)."""
TILE = 4
"""Output pixels summed at once, each in its own register, so that their chains of
multiply-adds overlap (a multiply-add's latency is about four times its throughput)."""
PART_WORK = 1 << 20
"""Multiply-adds a band of output rows shared among threads holds, about."""


@inline
def border_pixel(x, weight, k0, acc, iy0, ix0, height, width, kh, kw, dh, dw):  # noqa: ANN001, ANN201
    """``acc`` plus the output pixel whose window's corner is input (``iy0``, ``ix0``), for
    output channels ``k0:k0 + LANES``, over the taps inside the image only."""
    k = weight.shape[1]
    t = 0
    for c in range(x.shape[0]):
        for i in range(kh):
            iy = iy0 + i * dh
            for j in range(kw):
                ix = ix0 + j * dw
                if 0 <= iy < height and 0 <= ix < width:
                    acc = multiply_add(splat(x[c, iy, ix]), load(weight, t * k + k0, None), acc)
                t += 1
    return acc


@kernel
def direct_rows(x: np.ndarray, offsets: np.ndarray, weight: np.ndarray, bias: np.ndarray, out: np.ndarray,
                y0: int, y1: int, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, top: int, left: int,
                code: int, a: np.float32, b: np.float32) -> None:
    """Output rows ``y0:y1`` of the convolution of one image ``x`` (C, H, W) into ``out`` (OH,
    OW, K), then ``activation(out + bias)``. ``weight`` (C*kh*kw, K; K at least
    :data:`LANES`) holds a row per tap, channel by channel, each row by row; ``offsets``, the
    flat offset in ``x`` of each tap from its window's corner; the strides, dilations and
    the padding above and left of the image are (``sh``, ``sw``), (``dh``, ``dw``), ``top`` and
    ``left``."""
    _, height, width = x.shape
    ow, k = out.shape[1], out.shape[2]
    taps = offsets.shape[0]
    finished = in_registers(code)
    interior_start = min(ow, -(-left // sw))                        # columns whose windows lie inside
    interior_stop = max(interior_start, min(ow, (width + left - (kw - 1) * dw - 1) // sw + 1))
    for y in range(y0, y1):
        iy0 = y * sh - top
        inside = iy0 >= 0 and iy0 + (kh - 1) * dh < height
        first, stop = (interior_start, interior_stop) if inside else (ow, ow)
        tiles_stop = first + (stop - first) // TILE * TILE
        corner = iy0 * width - left                                # flat offset of input (iy0, 0) - left
        for block in range(0, k, LANES):
            k0 = min(block, k - LANES)                              # the last block overlaps the one before
            start = load(bias, k0, None) if finished else splat(0)
            q = y * ow * k + k0
            for ox in range(first, tiles_stop, TILE):
                p = corner + ox * sw
                a0 = a1 = a2 = a3 = start
                for t in range(taps):
                    w = load(weight, t * k + k0, None)
                    at = p + offsets[t]
                    a0 = multiply_add(load_splat(x, at), w, a0)
                    a1 = multiply_add(load_splat(x, at + sw), w, a1)
                    a2 = multiply_add(load_splat(x, at + 2 * sw), w, a2)
                    a3 = multiply_add(load_splat(x, at + 3 * sw), w, a3)
                store(out, q + ox * k, finish_vector(a0, code, a, b), None)
                store(out, q + (ox + 1) * k, finish_vector(a1, code, a, b), None)
                store(out, q + (ox + 2) * k, finish_vector(a2, code, a, b), None)
                store(out, q + (ox + 3) * k, finish_vector(a3, code, a, b), None)
            for m in range(first + ow - tiles_stop):         # the rest: the borders, and past the tiles
                ox = m if m < first else m - first + tiles_stop
                acc = border_pixel(x, weight, k0, start, iy0, ox * sw - left, height, width, kh, kw, dh, dw)
                store(out, q + ox * k, finish_vector(acc, code, a, b), None)
        if not finished:
            for ox in range(ow):
                finish_row(out[y, ox], bias, code, a, b)


class CompiledDirect:
    """A convolution weight (K, C, kh, kw) of few input channels as the rows of
    :func:`direct_rows`, with its bias and activation (a :class:`CompiledEpilogue`'s), for
    zero padding."""

    def __init__(self, weight: np.ndarray, epilogue: CompiledEpilogue):
        self.kernel_size = weight.shape[2:]
        self.weight = kernel_array(weight.reshape(weight.shape[0], -1).T)
        self.bias, self.code = epilogue.bias, epilogue.code
        self._offsets: dict[tuple[int, int, int, int], np.ndarray] = {}

    def offsets(self, channels: int, height: int, width: int, dilation: tuple[int, int]) -> np.ndarray:
        """The flat offset of each tap from its window's corner in a (C, H, W) image
        (remembered per image size; threads making one at once make the same)."""
        key = (height, width, *dilation)
        offsets = self._offsets.get(key)
        if offsets is None:
            (kh, kw), (dh, dw) = self.kernel_size, dilation
            c, i, j = np.meshgrid(np.arange(channels), np.arange(kh) * dh, np.arange(kw) * dw, indexing="ij")
            offsets = self._offsets[key] = np.ascontiguousarray((c * height * width + i * width + j).reshape(-1))
        return offsets

    def __call__(self, x: np.ndarray, out_hw: tuple[int, int], stride: tuple[int, int],
                 dilation: tuple[int, int], padding: tuple[tuple[int, int], tuple[int, int]]) -> np.ndarray:
        """The convolution of NCHW ``x`` (any memory layout); a new contiguous (N, OH, OW, K)
        array, bands of its rows shared among threads."""
        x = kernel_array(x)
        n, c, h, w = x.shape
        (oh, ow), k = out_hw, self.weight.shape[1]
        (kh, kw), (sh, sw), (dh, dw) = self.kernel_size, stride, dilation
        offsets = self.offsets(c, h, w, dilation)
        out = empty((n, oh, ow, k))
        depth = self.weight.shape[0]
        step = max(1, PART_WORK // (ow * k * depth))

        def run(part: tuple[int, int]) -> None:
            image, first = part
            direct_rows(x[image], offsets, self.weight, self.bias, out[image], first, min(oh, first + step),
                        kh, kw, sh, sw, dh, dw, padding[0][0], padding[1][0], *self.code)

        run_parts([(image, first) for image in range(n) for first in range(0, oh, step)], n * oh * ow * k * depth,
                  run)
        return out
