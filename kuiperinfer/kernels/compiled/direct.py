"""Direct convolution of an input of few channels (an RGB image: a network's stem), bias
and activation applied while each output pixel is in registers.

The compiled twin of :func:`kuiperinfer.kernels.im2col.planar_conv2d` for zero padding. A
stem has too few input channels for a product to pay: its columns (27 values a pixel for
a 3x3 kernel on RGB) cost as much to make as to multiply. Here, as in XNNPACK's and MLAS's
convolutions of few channels, the input is read where it lies. For each output row, the
input rows its windows read are copied with their zero padding into a small scratch (C,
kh, padded width), a few hundred vector moves against tens of thousands of multiply-adds;
then for each block of :data:`~.vectors.LANES` output channels, :data:`TILE` output pixels
at a time sum, over the weight's rows (channel, tap row, tap column), each pixel's input
value repeated in every lane times the row's vector of output channels (one multiply-add
for ``LANES`` output channels), in as many accumulators as pixels. Where each input value
lies in the scratch is an offset from the window's corner, one per weight row, made once
per input width; the padding in the scratch spares the border pixels any check.

:class:`CompiledDirect` shares the output rows of its calls among the run's threads in
bands whose size depends on the work only, so the numbers are the same on any number of
threads. Its int8 form is :mod:`.int8_direct`.
"""

from __future__ import annotations

import numpy as np

from kuiperinfer.kernels.compiled.activation import finish_row, finish_vector, in_registers
from kuiperinfer.kernels.compiled.epilogue import CompiledEpilogue
from kuiperinfer.kernels.compiled.vectors import (
    LANES,
    load,
    load_if,
    load_splat,
    multiply_add,
    multiply_add_splats,
    repeat,
    rounded,
    splat,
    store,
)
from kuiperinfer.kernels.jit import empty, inline, kernel, kernel_array
from kuiperinfer.kernels.parallel import compiled_parts, kinds_of, threads_for

MAX_CHANNELS = 4
"""Input channels up to which a convolution computes directly (RGB, or RGB and depth)."""
MAX_TAPS = 160
"""Taps (input channels times kernel rows times columns) up to which a convolution computes
directly: a 7x7 stem on RGB, but not a vision transformer's 16x16 patches, whose columns
are the input's pixels reordered and whose product on the float32 tiles took half the time
(docs/performance.md, "fp32 stems: direct or through their columns")."""
TILE = 8
"""Output pixels summed at once, each in its own register, so that their chains of
multiply-adds overlap (a multiply-add's latency is about four times its throughput; 8 were
10-15% faster than 4 on Zen 4)."""
PART_WORK = 1 << 20
"""Multiply-adds a band of output rows shared among threads holds, about."""
NO_SCALE = np.zeros(0, np.float32)
"""The scale of :func:`row_sums` whose sums are not scaled."""


@inline
def padded_rows(x: np.ndarray, rows: np.ndarray, y: int, sh: int, dh: int, top: int, left: int) -> None:
    """Into ``rows`` (C, kh, padded width), the input rows of ``x`` (C, H, W) that the windows
    of output row ``y`` read, from column ``left`` on (the padding around them stays as it is)."""
    channels, height, width = x.shape
    kh, padded_width = rows.shape[1], rows.shape[2]
    copied = max(0, min(width, padded_width - left))
    for c in range(channels):
        for i in range(kh):
            iy = y * sh - top + i * dh
            target = (c * kh + i) * padded_width + left
            source = (c * height + iy) * width
            for j in range(0, copied, LANES):
                count = min(LANES, copied - j)
                values = load_if(x, source + j, count, 0 <= iy < height)
                store(rows, target + j, values, count)


@inline
def row_sums(rows: np.ndarray, offsets: np.ndarray, weight: np.ndarray, finished: bool, bias: np.ndarray,
             out: np.ndarray, q: int, ow: int, sw: int, code: int, a: np.float32, b: np.float32,
             scale: np.ndarray) -> None:
    """One output row: each of its ``ow`` pixels' ``K`` sums over the taps of ``rows`` (a
    :func:`padded_rows`), stored from ``out``'s flat index ``q`` on, pixel by pixel; a
    non-empty ``scale`` (K) multiplies each output channel's sums; where ``finished``, the
    ``bias`` is added (to the scaled sums, or as the sums' start) and the activation of
    ``code`` (one that :func:`~.activation.in_registers` applies) applied."""
    k = weight.shape[1]
    taps = offsets.shape[0]
    tiles_stop = ow // TILE * TILE
    scaled = scale.shape[0] > 0
    for block in range(0, k, LANES):
        k0 = min(block, k - LANES)                              # the last block overlaps the one before
        start = load(bias, k0, None) if finished and not scaled else splat(0)
        factor = load(scale, k0, None) if scaled else splat(1)
        added = load(bias, k0, None) if finished and scaled else splat(0)
        at = q + k0
        for ox in range(0, tiles_stop, TILE):
            sums = repeat(start, TILE)
            for t in range(taps):
                sums = multiply_add_splats(rows, ox * sw + offsets[t], sw, load(weight, t * k + k0, None), sums)
            for m in range(TILE):
                store(out, at + (ox + m) * k, finish_vector(settled(sums[m], scaled, factor, finished, added),
                                                            code, a, b), None)
        for ox in range(tiles_stop, ow):                        # the pixels past the last tile
            acc = start
            for t in range(taps):
                acc = multiply_add(load_splat(rows, ox * sw + offsets[t]), load(weight, t * k + k0, None), acc)
            store(out, at + ox * k, finish_vector(settled(acc, scaled, factor, finished, added), code, a, b), None)


@inline
def settled(sums, scaled: bool, factor, finished: bool, added):  # noqa: ANN001, ANN201
    """A vector of sums times the ``factor`` and, ``finished``, plus the bias ``added``, where
    they are ``scaled`` (each step rounded, as the int8 products' epilogue rounds it)."""
    if not scaled:
        return sums
    return rounded(sums * factor) + added if finished else sums * factor


@kernel
def direct_rows(x: np.ndarray, offsets: np.ndarray, weight: np.ndarray, bias: np.ndarray, out: np.ndarray,
                y0: int, y1: int, base: int, sh: int, sw: int, dh: int, top: int, left: int, rows: np.ndarray,
                code: int, a: np.float32, b: np.float32) -> None:
    """Output rows ``y0:y1`` of the convolution of one image ``x`` (C, H, W) into ``out`` (OH,
    OW, K; or its rows from output row ``base`` on), then ``activation(out + bias)``.
    ``weight`` (C*kh*kw, K; K at least :data:`LANES`) holds a row per tap, channel by channel,
    each row by row; ``rows`` is the (C, kh, padded width) scratch, and ``offsets`` the flat
    offset in it of each tap from its window's corner. The strides are (``sh``, ``sw``), the
    dilation along the height ``dh``; the padding above and left of the image ``top`` and
    ``left``."""
    ow, k = out.shape[1], out.shape[2]
    finished = in_registers(code)
    rows[:] = 0
    for y in range(y0, y1):
        padded_rows(x, rows, y, sh, dh, top, left)
        row_sums(rows, offsets, weight, finished, bias, out, (y - base) * ow * k, ow, sw, code, a, b, NO_SCALE)
        if not finished:
            for ox in range(ow):
                finish_row(out[y - base, ox], bias, code, a, b)


class DirectWeight:
    """A convolution weight of few input channels as the rows the direct kernels take (a
    row per tap, channel by channel, each row by row), and how their calls share an image's
    output rows among the run's threads."""

    def __init__(self, weight: np.ndarray):
        self.kernel_size = weight.shape[2:]
        self.weight = kernel_array(weight.reshape(weight.shape[0], -1).T)
        self._offsets: dict[tuple[int, int, int], np.ndarray] = {}

    def offsets(self, channels: int, padded_width: int, column_dilation: int) -> np.ndarray:
        """The flat offset of each tap from its window's corner in the (C, kh, padded width)
        scratch of :func:`padded_rows` (remembered per width; threads making one at once make
        the same)."""
        key = (channels, padded_width, column_dilation)
        offsets = self._offsets.get(key)
        if offsets is None:
            kh, kw = self.kernel_size
            c, i, j = np.meshgrid(np.arange(channels), np.arange(kh), np.arange(kw) * column_dilation, indexing="ij")
            offsets = self._offsets[key] = ((c * kh + i) * padded_width + j).reshape(-1)
        return offsets

    def bands(self, x: np.ndarray, out_hw: tuple[int, int], stride: tuple[int, int],
              dilation: tuple[int, int]) -> tuple[int, int, np.ndarray, tuple[int, int, int]]:
        """How the convolution of ``x`` (N, C, H, W) is cut: the output rows of each band, the
        bands of each image, the taps' ``offsets`` and the shape of a band's scratch rows."""
        c = x.shape[1]
        (_, ow), k = out_hw, self.weight.shape[1]
        (kh, kw), sw, dw = self.kernel_size, stride[1], dilation[1]
        padded_width = (ow - 1) * sw + (kw - 1) * dw + 1
        step = max(1, PART_WORK // (ow * k * self.weight.shape[0]))
        return step, -(-out_hw[0] // step), self.offsets(c, padded_width, dw), (c, kh, padded_width)

    def work(self, x: np.ndarray, out_hw: tuple[int, int]) -> int:
        """Multiply-adds of the convolution of ``x``."""
        return x.shape[0] * out_hw[0] * out_hw[1] * self.weight.shape[1] * self.weight.shape[0]


class CompiledDirect(DirectWeight):
    """A convolution weight (K, C, kh, kw) of few input channels as the rows of
    :func:`direct_rows`, with its bias and activation (a :class:`CompiledEpilogue`'s), for
    zero padding."""

    def __init__(self, weight: np.ndarray, epilogue: CompiledEpilogue):
        super().__init__(weight)
        self.bias, self.code = epilogue.bias, epilogue.code
        self._kinds: object = None

    def __call__(self, x: np.ndarray, out_hw: tuple[int, int], stride: tuple[int, int],
                 dilation: tuple[int, int], padding: tuple[tuple[int, int], tuple[int, int]]) -> np.ndarray:
        """The convolution of NCHW ``x`` (any memory layout); a new contiguous (N, OH, OW, K)
        array, bands of its rows shared among threads."""
        x = kernel_array(x)
        out = empty((x.shape[0], *out_hw, self.weight.shape[1]))
        step, bands, offsets, scratch = self.bands(x, out_hw, stride, dilation)
        work = self.work(x, out_hw)
        rows = np.empty((min(threads_for(work), x.shape[0] * bands), *scratch), np.float32)
        head = (x, offsets, self.weight, self.bias, out, step, bands, *stride, dilation[0], padding[0][0],
                padding[1][0], rows, *self.code, 0)
        self._kinds = self._kinds or kinds_of(head)     # the same on every call: arrays this class makes
        compiled_parts(direct_parts, per_thread=True).run(x.shape[0] * bands, work, head, (), self._kinds)
        return out


@kernel
def direct_parts(x: np.ndarray, offsets: np.ndarray, weight: np.ndarray, bias: np.ndarray, out: np.ndarray,
                 step: int, bands: int, sh: int, sw: int, dh: int, top: int, left: int, rows: np.ndarray, code: int,
                 a: np.float32, b: np.float32, thread: int, first: int, last: int) -> None:
    """Parts ``first:last`` of a :class:`CompiledDirect` call, as the pool's threads take them
    (:class:`~kuiperinfer.kernels.parallel.CompiledParts`): part ``p`` is the band ``p % bands``
    of ``step`` output rows of image ``p // bands`` (:func:`direct_rows`), through thread
    ``thread``'s scratch ``rows[thread]``."""
    oh = out.shape[1]
    for part in range(first, last):
        image, y0 = part // bands, part % bands * step
        direct_rows(x[image], offsets, weight, bias, out[image], y0, min(oh, y0 + step), 0, sh, sw, dh, top, left,
                    rows[thread], code, a, b)
