"""Depthwise convolution on channels-last (NHWC) input, bias and activation applied while
each output pixel is in cache; alone, or after a 1x1 convolution a stripe of rows at a time.

The compiled twin of :mod:`kuiperinfer.kernels.depthwise` and
:mod:`kuiperinfer.kernels.depthwise_stripes` for zero padding (any amount per side) and no
dilation. :func:`depthwise_rows` is the one kernel, for every kernel size and stride: for
each output pixel, each tap that falls inside the image adds its input pixel times the
tap's weights, a loop along the channels, which are contiguous in NHWC memory, so LLVM
vectorises it. Taps that fall on the padding are skipped, so no padded copy of the input
is made; the input rows the kernel reads may be a block of the image's rows (a stripe
buffer), said by the row the block starts at.

:func:`pointwise_depthwise` computes a MobileNet/EfficientNet block's expansion and
filter: the 1x1 product (BLAS, which releases the GIL) fills a buffer of the input rows a
stripe of output rows reads, the compiled epilogue finishes it, and the depthwise kernel
consumes it while it is in cache; the expanded tensor never exists whole.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kuiperinfer.kernels.compiled.activation import finish_row
from kuiperinfer.kernels.compiled.epilogue import CompiledEpilogue, finish_rows
from kuiperinfer.kernels.jit import kernel, kernel_array
from kuiperinfer.kernels.parallel import even_step, run_parts, threads_for

Padding = tuple[tuple[int, int], tuple[int, int]]

STRIPE_BYTES = 1 << 20
"""Size of the buffer of expanded rows a stripe of output rows reads: small enough to stay
in the core's cache between the product that writes it and the kernel that reads it."""
PART_WORK = 1 << 21
"""Multiply-adds a part of an operator shared among threads should hold at least: a
hand-off costs tens of microseconds."""
PARTS_PER_THREAD = 4
"""Parts per thread at most, so that a thread the machine deschedules leaves its share to
the others."""
FUSED_PARTS_PER_THREAD = 2
"""The same for a 1x1 product and depthwise convolution: fewer, larger parts, since each
band of rows also makes the expanded rows it shares with the next, and each block of
channels is a narrower, less efficient product."""


@kernel
def depthwise_rows(x: np.ndarray, row0: int, height: int, taps: np.ndarray, bias: np.ndarray, out: np.ndarray,
                   channel0: int, y0: int, y1: int, sh: int, sw: int, top: int, left: int, code: int, a: np.float32,
                   b: np.float32) -> None:
    """Output rows ``y0:y1`` of the depthwise convolution of C channels of one image into
    channels ``channel0:channel0 + C`` of ``out`` (OH, OW, C'), then ``activation(out + bias)``.
    ``x`` (R, W, C) holds the image's rows ``row0:row0 + R`` (every row the output rows read
    inside the image, whose height is ``height``); ``taps`` is (kh, kw, C); the padding above
    and left of the image is ``top`` and ``left`` (what lies past the image below and right
    is padding too).

    A pixel whose 3x3 window lies inside the image takes all nine taps in one loop along
    the channels, which stores each output value once; a row of three or five taps inside
    the image takes one loop; the rest one loop per tap."""
    kh, kw, c = taps.shape
    w = x.shape[1]
    ow = out.shape[1]
    for y in range(y0, y1):
        iy0 = y * sh - top
        i_lo, i_hi = max(0, -iy0), min(kh, height - iy0)
        for ox in range(ow):
            o = out[y, ox, channel0:channel0 + c]
            ix0 = ox * sw - left
            j_lo, j_hi = max(0, -ix0), min(kw, w - ix0)
            if kh == 3 and kw == 3 and i_lo == 0 and i_hi == 3 and j_lo == 0 and j_hi == 3:
                r0, r1, r2 = x[iy0 - row0], x[iy0 + 1 - row0], x[iy0 + 2 - row0]
                for q in range(c):
                    o[q] = (r0[ix0, q] * taps[0, 0, q] + r0[ix0 + 1, q] * taps[0, 1, q]
                            + r0[ix0 + 2, q] * taps[0, 2, q] + r1[ix0, q] * taps[1, 0, q]
                            + r1[ix0 + 1, q] * taps[1, 1, q] + r1[ix0 + 2, q] * taps[1, 2, q]
                            + r2[ix0, q] * taps[2, 0, q] + r2[ix0 + 1, q] * taps[2, 1, q]
                            + r2[ix0 + 2, q] * taps[2, 2, q])
            else:
                for q in range(c):
                    o[q] = 0
                whole_row = j_lo == 0 and j_hi == kw
                for i in range(i_lo, i_hi):
                    r, t = x[iy0 + i - row0], taps[i]
                    if whole_row and kw == 5:
                        for q in range(c):
                            o[q] += (r[ix0, q] * t[0, q] + r[ix0 + 1, q] * t[1, q] + r[ix0 + 2, q] * t[2, q]
                                     + r[ix0 + 3, q] * t[3, q] + r[ix0 + 4, q] * t[4, q])
                    elif whole_row and kw == 3:
                        for q in range(c):
                            o[q] += r[ix0, q] * t[0, q] + r[ix0 + 1, q] * t[1, q] + r[ix0 + 2, q] * t[2, q]
                    else:
                        for j in range(j_lo, j_hi):
                            pixel, tap = r[ix0 + j], t[j]
                            for q in range(c):
                                o[q] += pixel[q] * tap[q]
            finish_row(o, bias, code, a, b)


def output_size(size: int, kernel_size: int, stride: int, before: int, after: int) -> int:
    return (size + before + after - kernel_size) // stride + 1


class CompiledDepthwise:
    """A depthwise weight as the (kh, kw, C) taps of :func:`depthwise_rows`, with its bias and
    activation (a :class:`CompiledEpilogue`'s), for zero padding and no dilation."""

    def __init__(self, taps: np.ndarray, epilogue: CompiledEpilogue):
        self.taps = kernel_array(taps)
        self.bias, self.code = epilogue.bias, epilogue.code
        self._blocks: dict[tuple[int, int], np.ndarray] = {}

    def block(self, channels: slice) -> tuple[np.ndarray, np.ndarray]:
        """The taps and bias of a block of channels, as contiguous arrays (the taps' copy is
        remembered; threads making one at once make the same)."""
        if channels == slice(0, self.taps.shape[2]):
            return self.taps, self.bias
        key = (channels.start, channels.stop)
        taps = self._blocks.get(key)
        if taps is None:
            taps = self._blocks[key] = np.ascontiguousarray(self.taps[:, :, channels])
        return taps, self.bias[channels]

    def rows(self, x: np.ndarray, row0: int, height: int, out: np.ndarray, channels: slice, y0: int, y1: int,
             stride: tuple[int, int], padding: Padding) -> None:
        """Output rows ``y0:y1`` of ``channels`` of one image into ``out`` (OH, OW, C) from the
        image's rows ``row0:`` in ``x`` (R, W, channels' count): :func:`depthwise_rows`."""
        taps, bias = self.block(channels)
        depthwise_rows(x, row0, height, taps, bias, out, channels.start, y0, y1, stride[0], stride[1],
                       padding[0][0], padding[1][0], *self.code)

    def __call__(self, x: np.ndarray, stride: tuple[int, int], padding: Padding) -> np.ndarray:
        """The convolution of NHWC ``x`` (any memory layout); a new contiguous (N, OH, OW, C)
        array, its images or bands of rows shared among threads."""
        x = kernel_array(x)
        n, h, w, c = x.shape
        kh, kw = self.taps.shape[:2]
        oh = output_size(h, kh, stride[0], *padding[0])
        ow = output_size(w, kw, stride[1], *padding[1])
        out = np.empty((n, oh, ow, c), np.float32)
        work = n * oh * ow * c * kh * kw
        every = slice(0, c)

        def run(part: Part) -> None:
            image, first, stop, _ = part
            self.rows(x[image], 0, h, out[image], every, first, stop, stride, padding)

        run_parts(parts_of(n, oh, c, work, threads_for(work)), work, run)
        return out


Part = tuple[int, int, int, slice]
"""An image, its first and stop output rows, and a block of its channels."""

HALO_SHARE = 0.5
"""Extra expanded rows a band of output rows may make, as a share of its own, beyond which a
single image's parts are blocks of channels instead: each band makes the rows it shares
with the next (``kh - stride`` of them) too."""
CHANNEL_STEP = 8
"""Channel blocks are multiples of it, for the kernel's vector loop along the channels."""


def parts_of(images: int, rows: int, channels: int, work: int, threads: int, halo: int = 0,
             stride: int = 1, per_thread: int = PARTS_PER_THREAD) -> list[Part]:
    """Parts of an operator of ``work`` over ``images`` images of ``rows`` output rows and
    ``channels`` channels: whole images for one thread, or at least as many images as
    threads; else each image in up to ``per_thread`` parts per thread of at least
    :data:`PART_WORK` each: bands of rows, or blocks of channels where bands would make
    more than :data:`HALO_SHARE` extra of the ``halo`` rows (of input, ``stride`` per output row)
    that bands share."""
    every = slice(0, channels)
    if threads < 2 or images >= threads:
        return [(image, 0, rows, every) for image in range(images)]
    count = max(1, min(per_thread * threads // images, work // (images * PART_WORK)))
    step = even_step(rows, -(-rows // count), threads, images)
    if halo <= HALO_SHARE * step * stride or channels < 2 * CHANNEL_STEP:
        return [(image, start, min(rows, start + step), every) for image in range(images)
                for start in range(0, rows, step)]
    blocks = min(count, channels // CHANNEL_STEP)
    bounds = sorted({min(channels, CHANNEL_STEP * round(channels * i / blocks / CHANNEL_STEP))
                     for i in range(blocks + 1)} | {channels})
    return [(image, 0, rows, slice(start, stop)) for image in range(images)
            for start, stop in zip(bounds, bounds[1:]) if stop > start]


PointwiseRows = Callable[[np.ndarray, np.ndarray, slice], object]
"""A stripe's 1x1 convolution: ``pointwise(rows, out, channels)`` writes the output channels
``channels`` of the product of the input pixels ``rows`` (P, Cin), its epilogue applied, into
the float32 ``out`` (P, width)."""


def float_pointwise(matrix: np.ndarray, epilogue: CompiledEpilogue) -> PointwiseRows:
    """The float32 1x1 convolution ``rows @ matrix`` (Cin, E), then ``epilogue``."""
    def pointwise(rows: np.ndarray, out: np.ndarray, channels: slice) -> None:
        np.matmul(rows, matrix[:, channels], out=out)
        finish_rows(out, epilogue.bias[channels], *epilogue.code)
    return pointwise


def pointwise_depthwise(x: np.ndarray, pointwise: PointwiseRows, channels: int, depthwise: CompiledDepthwise,
                        stride: tuple[int, int], padding: Padding) -> np.ndarray:
    """``depthwise(pointwise(x))`` of NHWC ``x`` (N, H, W, Cin; any memory layout, float32 or
    the form ``pointwise`` multiplies), where the 1x1 convolution makes ``channels`` channels;
    a new contiguous (N, OH, OW, channels) array. Each part (an image, a band of a single
    image's rows or a block of its channels) walks down its output rows a stripe at a time:
    the product fills the buffer with the expanded input rows the stripe reads that the
    previous stripe did not, then the depthwise kernel makes the stripe's rows."""
    x = np.ascontiguousarray(x)
    n, h, w, c_in = x.shape
    kh, kw = depthwise.taps.shape[:2]
    (sh, _), top = stride, padding[0][0]
    oh = output_size(h, kh, sh, *padding[0])
    ow = output_size(w, kw, stride[1], *padding[1])
    out = np.empty((n, oh, ow, channels), np.float32)
    work = n * h * w * c_in * channels + n * oh * ow * channels * kh * kw
    parts = parts_of(n, oh, channels, work, threads_for(work), max(0, kh - sh), sh, FUSED_PARTS_PER_THREAD)

    def run(part: Part) -> None:
        image, first, stop, block = part
        source = x[image]
        width = block.stop - block.start
        stripe = max(1, (STRIPE_BYTES // (w * width * 4) - kh) // sh + 1)
        rows = min(h, (min(stripe, stop - first) - 1) * sh + kh)
        buffer = np.empty((rows, w, width), np.float32)
        held_start = held_stop = 0          # the image rows the buffer holds, from its top
        for y in range(first, stop, stripe):
            end = min(stop, y + stripe)
            start, finish = max(0, y * sh - top), min(h, (end - 1) * sh - top + kh)
            keep = max(0, held_stop - start) if held_start <= start else 0
            if keep:
                buffer[:keep] = buffer[start - held_start:held_stop - held_start]
            if finish > start + keep:
                pointwise(source[start + keep:finish].reshape(-1, c_in), buffer[keep:finish - start].reshape(-1, width),
                          block)
            held_start, held_stop = start, finish
            depthwise.rows(buffer, start, h, out[image], block, y, end, stride, padding)

    run_parts(parts, work, run)
    return out
