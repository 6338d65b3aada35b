"""Depthwise convolution on channels-last (NHWC) input, bias and activation applied while
each output pixel is in cache; alone, or after a 1x1 convolution a stripe of rows at a time.

The compiled twin of :mod:`kuiperinfer.kernels.depthwise` and
:mod:`kuiperinfer.kernels.depthwise_stripes` for zero padding (any amount per side) and no
dilation. :func:`depthwise_rows` makes the one kernel, for every stride, compiled once
per kernel size: for each output row and block of :data:`~.vectors.LANES` channels (the
channels are contiguous in NHWC memory), the block's taps are loaded into vector
registers (:mod:`.vectors`), then each output pixel sums its window's input vectors times
them, adds the bias and applies a piecewise linear activation in registers, and stores
the block once. Each row splits into its border columns, whose windows reach into the
padding and take zeros for the taps outside the image, and its interior, whose windows
take every tap without a check; a small image, whose borders are most of its pixels, is
first copied with its padding into a scratch, so that every pixel is an interior one. The
input rows the kernel reads may be a block of the image's rows (a stripe buffer), said by
the row the block starts at. In int8 the output may be uint8 in the form the next product
takes (:data:`Form`): each vector is quantized as it is stored.

:func:`pointwise_depthwise` computes a MobileNet/EfficientNet block's expansion and
filter: the 1x1 product fills a buffer of the input rows a stripe of output rows reads, its
epilogue finishes it, and the depthwise kernel consumes it while it is in cache; the
expanded tensor never exists whole. A product on the matrix engine's tiles runs each part's
stripes in one compiled call (:class:`TiledStripes`): a part costs one call's
Python and takes the GIL once, so that the parts the threads share run at once (a stripe
loop in Python took the GIL twice per stripe, and two threads waiting on each other for it
made each quarter of an operator as slow as the whole).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import cache
from typing import NamedTuple

import numpy as np

from kuiperinfer.kernels.compiled.activation import finish_row, finish_vector, in_registers
from kuiperinfer.kernels.compiled.epilogue import CompiledEpilogue, finish_rows
from kuiperinfer.kernels.compiled.vectors import (
    LANES,
    REGISTERS,
    load,
    load_if,
    load_strided,
    multiply_add,
    splat,
    store,
    store_output,
)
from kuiperinfer.kernels.jit import AVAILABLE, KernelAddress, empty, inline, kernel, kernel_array, scratch
from kuiperinfer.kernels.parallel import PART_WORK, compiled_parts, even_step, kinds_of, run_parts, threads_for

if AVAILABLE:   # the matrix engine's tiles exist only compiled; without Numba no product has them
    from kuiperinfer.kernels.compiled.products import BLOCKS, DOT_BLOCKS, TILES
    from kuiperinfer.kernels.jit import function_at

Padding = tuple[tuple[int, int], tuple[int, int]]

STRIPE_BYTES = 1 << 20
"""Size of the buffer of expanded rows a stripe of output rows reads: small enough to stay
in the core's cache between the product that writes it and the kernel that reads it."""
PADDED_BYTES = 32 << 10
"""Size up to which the input a call reads is copied with its padding into a scratch per
block of channels (:func:`rows_padded`): small images, whose borders are most of them."""
PARTS_PER_THREAD = 4
"""Parts per thread at most, so that a thread the machine deschedules leaves its share to
the others."""
FUSED_PARTS_PER_THREAD = 2
"""The same for a 1x1 product and depthwise convolution: fewer, larger parts, since each
band of rows also makes the expanded rows it shares with the next, and each block of
channels is a narrower, less efficient product."""


@inline
def window(x, p, row, column, held, acc, kh, kw, i_lo, i_hi, j_lo, j_hi):  # noqa: ANN001, ANN201
    """``acc`` plus the ``held`` taps (a tuple in registers) ``i_lo:i_hi``, ``j_lo:j_hi`` (those
    inside the image) times the window whose top left vector is x's flat element ``p``, its
    rows and columns ``row`` and ``column`` elements apart. ``kh`` and ``kw`` are constants, so
    that the loops unroll; a tap outside the bounds loads zeros (:func:`~.vectors.load_if`: no
    branch), and for a pixel inside the image the bounds are constants and its loads plain. A
    partial sum per row of taps shortens the chain of dependent multiply-adds where the
    registers hold them beside the taps (3x3: a third faster), else one chain."""
    partial = kh * kw + kh <= REGISTERS - 4
    for i in range(kh):
        part = splat(0) if partial else acc
        for j in range(kw):
            inside = (i_lo <= i) & (i < i_hi) & (j_lo <= j) & (j < j_hi)
            part = multiply_add(load_if(x, p + i * row + j * column, None, inside), held[i * kw + j], part)
        acc = acc + part if partial else part
    return acc


@inline
def rows_in_blocks(x, row0, height, taps, bias, out, channel0, y0, y1, sh, sw, top, left, code, a, b,  # noqa: ANN001, ANN201
                   scale, zero_point, kh, kw, taps_count):
    """:func:`depthwise_rows`'s kernel for blocks of :data:`LANES` channels (the last one
    overlapping the one before it, whose values it computes again)."""
    c, w, ow, oc = x.shape[2], x.shape[1], out.shape[1], out.shape[2]
    row, column = w * c, c
    finished = in_registers(code)
    interior_start = min(ow, -(-left // sw))                        # columns whose windows lie inside
    interior_stop = max(interior_start, min(ow, (w + left - kw) // sw + 1))
    for y in range(y0, y1):
        iy0 = y * sh - top
        i_lo, i_hi = max(0, -iy0), min(kh, height - iy0)
        first, stop = (interior_start, interior_stop) if i_lo == 0 and i_hi == kh else (ow, ow)
        for block in range(0, c, LANES):
            c0 = min(block, c - LANES)
            held = load_strided(taps, channel0 + c0, oc, taps_count, None)
            start = load(bias, channel0 + c0, None) if finished else splat(0)
            p = (iy0 - row0) * row - left * column + c0              # input (iy0, -left), channel c0
            q = y * ow * oc + channel0 + c0                          # output (y, 0)
            for ox in range(first, stop):
                acc = window(x, p + ox * sw * column, row, column, held, start, kh, kw, 0, kh, 0, kw)
                store_output(out, q + ox * oc, finish_vector(acc, code, a, b), None, scale, zero_point)
            for k in range(first + ow - stop):                        # the border columns, left and right
                ox = k if k < first else k - first + stop
                ix0 = ox * sw - left
                acc = window(x, p + ox * sw * column, row, column, held, start, kh, kw, i_lo, i_hi,
                             max(0, -ix0), min(kw, w - ix0))
                store_output(out, q + ox * oc, finish_vector(acc, code, a, b), None, scale, zero_point)


@inline
def rows_padded(x, row0, height, taps, bias, out, channel0, y0, y1, sh, sw, top, left, code, a, b,  # noqa: ANN001, ANN201
                scale, zero_point, kh, kw, taps_count, count, padded):
    """:func:`rows_in_blocks` through ``padded``, a (rows, columns, LANES) scratch as large as
    the input the output rows read with its padding: each block of channels of the input is
    copied into it (the padding stays zero), then every pixel takes its window without a
    check. A small image's many border pixels cost more than the copy. Fewer channels than
    a vector (``count`` of them, not None) go this way at any size: the lanes past them stay
    zero in the scratch and are not stored."""
    c, w, ow, oc = x.shape[2], x.shape[1], out.shape[1], out.shape[2]
    rows, columns = padded.shape[0], padded.shape[1]
    first_row = y0 * sh - top                                       # the image row of the scratch's first
    row_start, row_stop = max(0, -first_row), min(rows, height - first_row)
    column_stop = min(w, columns - left)
    finished = in_registers(code)
    padded[:] = 0
    for block in range(0, c, LANES):
        c0 = 0 if count is not None else min(block, c - LANES)
        for r in range(row_start, row_stop):
            source = (r + first_row - row0) * w * c + c0
            target = (r * columns + left) * LANES
            for ix in range(column_stop):
                store(padded, target + ix * LANES, load(x, source + ix * c, count), None)
        held = load_strided(taps, channel0 + c0, oc, taps_count, count)
        start = load(bias, channel0 + c0, count) if finished else splat(0)
        for y in range(y0, y1):
            p = (y - y0) * sh * columns * LANES
            q = y * ow * oc + channel0 + c0
            for ox in range(ow):
                acc = window(padded, p + ox * sw * LANES, columns * LANES, LANES, held, start, kh, kw,
                             0, kh, 0, kw)
                store_output(out, q + ox * oc, finish_vector(acc, code, a, b), count, scale, zero_point)


def padded_shape(rows: int, columns: int, channels: int) -> tuple[int, int, int]:
    """The shape of :func:`rows_padded`'s scratch for a call whose output rows read ``rows``
    x ``columns`` pixels with the padding: empty where the call goes without it (more than
    :data:`PADDED_BYTES`, and at least :data:`LANES` channels)."""
    small = rows * columns * LANES * 4 <= PADDED_BYTES or channels < LANES
    return (rows, columns, LANES) if small else (0, 0, LANES)


compiled_padded_shape = inline(padded_shape)
""":func:`padded_shape` as the compiled stripes call it."""


@cache
def depthwise_rows(kh: int, kw: int) -> Callable[..., None]:
    """The depthwise kernel for ``kh`` x ``kw`` taps, compiled once per size (its loops over the
    taps unrolled, so that a block of channels' taps stay in registers)."""
    taps_count = kh * kw

    def depthwise(x: np.ndarray, row0: int, height: int, taps: np.ndarray, bias: np.ndarray, out: np.ndarray,
                  channel0: int, y0: int, y1: int, sh: int, sw: int, top: int, left: int, code: int, a: np.float32,
                  b: np.float32, scale: np.float32, zero_point: np.float32, padded: np.ndarray) -> None:
        """Output rows ``y0:y1`` of the depthwise convolution of C channels of one image into
        channels ``channel0:channel0 + C`` of ``out`` (OH, OW, C'), then ``activation(out + bias)``.
        ``x`` (R, W, C) holds the image's rows ``row0:row0 + R`` (every row the output rows read
        inside the image, whose height is ``height``); ``taps`` (kh, kw, C') and ``bias`` (C')
        are those of every channel of ``out``, so that a block of channels reads its own in
        place (no copy per block). A uint8 ``out`` takes the outputs quantized by ``scale`` and
        ``zero_point`` (:func:`~.vectors.store_output`; only for an activation
        :func:`~.activation.in_registers` computes); the padding above
        and left of the image is ``top`` and ``left`` (what lies past the image below and right
        is padding too). ``padded`` is empty, or the scratch of :func:`rows_padded`, which then
        computes the rows (it must, for fewer channels than :data:`LANES`)."""
        if x.shape[2] < LANES:
            rows_padded(x, row0, height, taps, bias, out, channel0, y0, y1, sh, sw, top, left, code, a, b,
                        scale, zero_point, kh, kw, taps_count, x.shape[2], padded)
        elif padded.size:
            rows_padded(x, row0, height, taps, bias, out, channel0, y0, y1, sh, sw, top, left, code, a, b,
                        scale, zero_point, kh, kw, taps_count, None, padded)
        else:
            rows_in_blocks(x, row0, height, taps, bias, out, channel0, y0, y1, sh, sw, top, left, code, a, b,
                           scale, zero_point, kh, kw, taps_count)
        if not in_registers(code):      # the sums were stored without their bias: add it, then the activation
            for y in range(y0, y1):
                for ox in range(out.shape[1]):
                    finish_row(out[y, ox, channel0:channel0 + x.shape[2]], bias[channel0:channel0 + x.shape[2]],
                               code, a, b)

    depthwise.__qualname__ = f"depthwise_rows_{kh}x{kw}"      # its name in kernel_stats and the cache
    return kernel(depthwise)


def output_size(size: int, kernel_size: int, stride: int, before: int, after: int) -> int:
    return (size + before + after - kernel_size) // stride + 1


_MAKING = threading.Lock()
"""Held while a :class:`CompiledDepthwise` or :class:`TiledStripes` makes the kernels its parts
call, so that threads reaching their first call at once compile each once."""


@kernel
def depthwise_parts(depthwise_at, depthwise_type, x, taps, bias, out, table, sh, sw, top, left, code, a, b,  # noqa: ANN001
                    scale, zero_point, first, last) -> None:
    """:meth:`CompiledDepthwise.__call__`'s parts ``first:last``, as the pool's threads take them
    (:class:`~kuiperinfer.kernels.parallel.CompiledParts`): each row of ``table`` (image, first
    and stop output rows) through the :func:`depthwise_rows` kernel at ``depthwise_at``."""
    depthwise = function_at(depthwise_at, depthwise_type)
    h, c = x.shape[1], x.shape[3]
    kh, kw = taps.shape[0], taps.shape[1]
    columns_read = (out.shape[2] - 1) * sw + kw
    for part in range(first, last):
        image, y0, y1 = table[part]
        padded = np.empty(compiled_padded_shape((y1 - y0 - 1) * sh + kh, columns_read, c), np.float32)
        depthwise(x[image], 0, h, taps, bias, out[image], 0, y0, y1, sh, sw, top, left, code, a, b, scale, zero_point,
                  padded)


Form = tuple[np.float32, np.float32]
"""The uint8 form int8 hands an output on in: its scale and zero point."""
NO_FORM: Form = (np.float32(1), np.float32(0))
"""The numbers a kernel storing float32 takes in place of a form (and does not read)."""


def output_array(shape: tuple[int, ...], form: Form | None) -> np.ndarray:
    """A new output of ``shape``: float32 on a cache line, or uint8 for a ``form``."""
    return empty(shape) if form is None else np.empty(shape, np.uint8)


class CompiledDepthwise:
    """A depthwise weight as the (kh, kw, C) taps of :func:`depthwise_rows`, with its bias and
    activation (a :class:`CompiledEpilogue`'s), for zero padding and no dilation."""

    def __init__(self, taps: np.ndarray, epilogue: CompiledEpilogue):
        self.taps = kernel_array(taps)
        self.bias, self.code = epilogue.bias, epilogue.code
        self.quantizes = bool(in_registers(epilogue.code.code))
        """Whether the kernel can hand its output on as uint8 (its activation is computed in
        registers, before the outputs are stored)."""
        self.kernel = depthwise_rows(*taps.shape[:2])
        self._addresses: dict[np.dtype, KernelAddress] = {}
        self._tables: dict[tuple[object, ...], np.ndarray] = {}

    def form_of(self, scale: float, zero_point: int) -> Form | None:
        """The uint8 form of ``scale`` and ``zero_point`` for this kernel to store its output in,
        or None where it stores float32 only."""
        return (np.float32(scale), np.float32(zero_point)) if self.quantizes else None

    def finish(self, form: Form | None) -> tuple:
        """The kernel's arguments after the padding: the activation's code, then the output's
        ``form`` (checked to be one the kernel can store)."""
        if form is not None and not self.quantizes:
            raise ValueError(f"a depthwise kernel of activation code {self.code.code} stores float32 only")
        return (*self.code, *(form or NO_FORM))

    def rows(self, x: np.ndarray, row0: int, height: int, out: np.ndarray, channels: slice, y0: int, y1: int,
             stride: tuple[int, int], padding: Padding, form: Form | None = None) -> None:
        """Output rows ``y0:y1`` of ``channels`` of one image into ``out`` (OH, OW, C; uint8 in
        ``form``, if given) from the image's rows ``row0:`` in ``x`` (R, W, channels' count):
        :func:`depthwise_rows`."""
        kh, kw = self.taps.shape[:2]
        padded = empty(padded_shape((y1 - y0 - 1) * stride[0] + kh, (out.shape[1] - 1) * stride[1] + kw,
                                    channels.stop - channels.start))
        self.kernel(x, row0, height, self.taps, self.bias, out, channels.start, y0, y1, stride[0], stride[1],
                    padding[0][0], padding[1][0], *self.finish(form), padded)

    def __call__(self, x: np.ndarray, stride: tuple[int, int], padding: Padding,
                 form: Form | None = None) -> np.ndarray:
        """The convolution of NHWC ``x`` (any memory layout); a new contiguous (N, OH, OW, C)
        array (uint8 in ``form``, if given), its images or bands of rows shared among threads
        as compiled parts (:func:`depthwise_parts`: a part's Python would hold the GIL its
        neighbour waits for)."""
        x = kernel_array(x)
        n, h, w, c = x.shape
        kh, kw = self.taps.shape[:2]
        oh = output_size(h, kh, stride[0], *padding[0])
        ow = output_size(w, kw, stride[1], *padding[1])
        out = output_array((n, oh, ow, c), form)
        work = n * oh * ow * c * kh * kw
        threads = threads_for(work)
        table = self._tables.get((n, oh, c, threads))
        if table is None:
            parts = parts_of(n, oh, c, work, threads)
            table = self._tables[n, oh, c, threads] = np.array([part[:3] for part in parts], np.int64)
        finish = self.finish(form)
        address = self._addresses.get(out.dtype)
        if address is None:
            with _MAKING:
                address = self._addresses.get(out.dtype) or KernelAddress(
                    self.kernel, x[0], 0, 0, self.taps, self.bias, out[0], 0, 0, 0, 0, 0, 0, 0, *finish,
                    empty((0, 0, LANES)))
                self._addresses[out.dtype] = address
        head = (address.address, address.type, x, self.taps, self.bias, out, table, *stride,
                padding[0][0], padding[1][0], *finish)
        compiled_parts(depthwise_parts).run(len(table), work, head, ())
        return out


Part = tuple[int, int, int, slice]
"""An image, its first and stop output rows, and a block of its channels."""

HALO_SHARE = 0.1
"""Extra expanded rows a band of output rows may make, as a share of its own, beyond which a
single image's parts are blocks of channels instead: each band makes the rows it shares
with the next (``kh - stride`` of them) too. Blocks of channels make no row twice, and
from an eighth of extra rows on they were faster (EfficientNet-Lite0's 480-channel 14x14
blocks on two threads: bands of 4 rows, half as many rows again, 157 us; 4 blocks of 120
channels, 110 us); at a thirtieth bands were (its first block, 56 rows at stride 2)."""
CHANNEL_STEP = LANES
"""Channel blocks start at multiples of it and hold at least as many channels: the
kernel's blocks of channels in registers."""


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
    bounds = sorted({CHANNEL_STEP * (channels * i // blocks // CHANNEL_STEP) for i in range(blocks)} | {channels})
    return [(image, 0, rows, slice(start, stop)) for image in range(images)
            for start, stop in zip(bounds, bounds[1:]) if stop > start]


PointwiseRows = Callable[[np.ndarray, np.ndarray, slice], object]
"""A stripe's 1x1 convolution: ``pointwise(rows, out, channels)`` writes the output channels
``channels`` of the product of the input pixels ``rows`` (P, Cin), its epilogue applied, into
the float32 ``out`` (P, width)."""

ProductTiles = tuple
"""A 1x1 convolution on the matrix engine's tiles, as :class:`TiledStripes` takes it:
``(kernel, packed, strip_bytes, correction, scale, bias, numbers)``
(:meth:`~kuiperinfer.kernels.matrix.products.Product.tiles`)."""


def float_pointwise(matrix: np.ndarray, epilogue: CompiledEpilogue) -> PointwiseRows:
    """The float32 1x1 convolution ``rows @ matrix`` (Cin, E), then ``epilogue``."""
    def pointwise(rows: np.ndarray, out: np.ndarray, channels: slice) -> None:
        np.matmul(rows, matrix[:, channels], out=out)
        finish_rows(out, epilogue.bias[channels], *epilogue.code)
    return pointwise


def stripe_of(w: int, width: int, kh: int, sh: int, h: int, rows: int) -> tuple[int, int]:
    """The output rows of a stripe of a part of ``rows`` output rows and ``width`` channels of
    an image ``w`` pixels wide, and the rows of its buffer of expanded input rows."""
    stripe = max(1, (STRIPE_BYTES // (w * width * 4) - kh) // sh + 1)
    return stripe, min(h, (min(stripe, rows) - 1) * sh + kh)


def stripe_rows(y: int, stripe: int, stop: int, sh: int, top: int, kh: int, h: int) -> tuple[int, int, int]:
    """The output rows of the stripe from row ``y``, and the image rows ``start:finish`` they read."""
    end = min(stop, y + stripe)
    return end, max(0, y * sh - top), min(h, (end - 1) * sh - top + kh)


compiled_stripe_rows = inline(stripe_rows)
""":func:`stripe_rows` as the compiled stripes call it."""


@inline
def kept_rows(pixels: np.ndarray, w: int, start: int, held_start: int, held_stop: int) -> int:
    """Of the image rows ``held_start:held_stop`` a stripe buffer holds (``pixels``, its rows of
    ``w`` pixels), those the stripe reading from row ``start`` on shares, moved to its top: how
    many."""
    keep = max(0, held_stop - start) if held_start <= start else 0
    for i in range(keep * w):
        pixels[i] = pixels[(start - held_start) * w + i]
    return keep


@cache
def stripes_walk(floats: bool) -> Callable[..., None]:
    """The kernel of a part of :func:`pointwise_depthwise` whose 1x1 product runs on the
    matrix engine's tiles: the part's whole walk down its stripes in one call, so that a
    thread that shares an operator holds the GIL once per part, not twice per stripe. It
    takes the compiled product (the float32 tiles' where ``floats``, else a dot's) and
    depthwise kernel as arguments, each as its address and type (:class:`TiledStripes`)."""

    def part(product_at, product_type, depthwise_at, depthwise_type, x, packed, strip_bytes, correction,  # noqa: ANN001
             scale, product_bias, numbers, lanes, taps, bias, out, first, stop, channel0, kh, sh, sw, top, left,
             code, a, b, out_scale, out_zero_point, stripe, buffer) -> None:
        """Output rows ``first:stop`` of the channels ``channel0:`` (as many as ``buffer`` has) of
        one image into ``out`` (OH, OW, C) from its input pixels ``x`` (H, W, Cin), ``stripe``
        rows at a time through ``buffer`` (rows, W, channels), as the Python loop of
        :func:`pointwise_depthwise` does."""
        product, depthwise = function_at(product_at, product_type), function_at(depthwise_at, depthwise_type)
        h, w, c_in = x.shape
        width = buffer.shape[2]
        pixels, expanded = x.reshape(h * w, c_in), buffer.reshape(buffer.shape[0] * w, width)
        residual = np.empty((0, 0), np.float32)
        parts = np.zeros((1, 4), np.int64)
        parts[0, 2], parts[0, 3] = channel0 // lanes, -(-(channel0 + width) // lanes)
        columns = (channel0, channel0 + width)
        columns_read = (out.shape[1] - 1) * sw + taps.shape[1]
        held_start = held_stop = 0          # the image rows the buffer holds, from its top
        for y in range(first, stop, stripe):
            end, start, finish = compiled_stripe_rows(y, stripe, stop, sh, top, kh, h)
            keep = kept_rows(expanded, w, start, held_start, held_stop)
            if finish > start + keep:
                parts[0, 1] = (finish - start - keep) * w
                source, target = pixels[(start + keep) * w:finish * w], expanded[keep * w:(finish - start) * w]
                if floats:
                    product(source, packed, parts, 0, 1, columns, product_bias, residual, target, numbers)
                else:
                    product(source, packed, strip_bytes, parts, 0, 1, columns, correction, scale, product_bias,
                            residual, target, numbers)
            held_start, held_stop = start, finish
            padded = np.empty(compiled_padded_shape((end - y - 1) * sh + kh, columns_read, width), np.float32)
            depthwise(buffer, start, h, taps, bias, out, channel0, y, end, sh, sw, top, left, code, a, b, out_scale,
                      out_zero_point, padded)

    part.__qualname__ = f"{'float' if floats else 'dot'}_stripes_walk"
    return kernel(part)


@kernel
def stripes_parts(walk_at, walk_type, product_at, product_type, depthwise_at, depthwise_type, x, packed,  # noqa: ANN001
                  strip_bytes, correction, scale, product_bias, numbers, lanes, taps, bias, out, table, sh, sw, top,
                  left, code, a, b, out_scale, out_zero_point, buffers, slot, thread, first, last) -> None:
    """:func:`pointwise_depthwise`'s parts ``first:last`` on the matrix engine's tiles, as the
    pool's threads take them (:class:`~kuiperinfer.kernels.parallel.CompiledParts`): each row
    of ``table`` (image, first and stop output rows, first and stop channels, stripe, buffer
    rows) walked down by the :func:`stripes_walk` at ``walk_at`` through thread ``thread``'s
    ``slot`` values of ``buffers``; every part reads the ``taps`` and ``bias`` of all channels."""
    walk = function_at(walk_at, walk_type)
    w, kh = x.shape[2], taps.shape[0]
    for part in range(first, last):
        image, y0, y1, c0, c1, stripe, rows = table[part]
        width = c1 - c0
        buffer = buffers[thread * slot:thread * slot + rows * w * width].reshape((rows, w, width))
        walk(product_at, product_type, depthwise_at, depthwise_type, x[image], packed, strip_bytes, correction,
             scale, product_bias, numbers, lanes, taps, bias, out[image], y0, y1, c0, kh, sh, sw, top,
             left, code, a, b, out_scale, out_zero_point, stripe, buffer)


_STRIPES_PARTS = compiled_parts(stripes_parts, per_thread=True)

StripesKernels = tuple[KernelAddress, KernelAddress, KernelAddress]
"""The kernels :class:`TiledStripes` runs: the walk (:func:`stripes_walk`), its product and
its depthwise kernel."""


class _StripesHead(NamedTuple):
    """:func:`stripes_parts`'s arguments before the parts that stay the same from call to call
    of a :class:`StripesCall` on some number of threads: those around the input
    (:attr:`before`, :attr:`between`) and the output (:attr:`after`), the scratch each thread
    keeps a buffer in, the parts' count and the arguments' kinds."""

    before: tuple
    between: tuple
    after: tuple
    scratch: tuple[int]
    slot: int
    count: int
    kinds: object


class TiledStripes:
    """A 1x1 convolution on the matrix engine's tiles (:data:`ProductTiles`) and the
    depthwise convolution after it, as :func:`stripes_walk` runs a part of them: the two
    compiled kernels handed to it by address (:class:`~kuiperinfer.kernels.jit.KernelAddress`),
    so that it compiles in a second, instead of each kernel size and tile compiling the
    product and the depthwise kernel again inside it (70-80 s each)."""

    def __init__(self, tiles: ProductTiles, depthwise: CompiledDepthwise):
        self.dot, self.packed, self.strip_bytes, self.correction, self.scale, self.bias, self.numbers = tiles
        self.depthwise = depthwise
        self.lanes = TILES[self.dot][2]
        self._kernels: dict[tuple[np.dtype, np.dtype], StripesKernels] = {}
        self._calls: dict[tuple[object, ...], StripesCall] = {}

    def call(self, shape: tuple[int, int, int, int], dtype: np.dtype, channels: int, stride: tuple[int, int],
             padding: Padding, form: Form | None = None) -> StripesCall:
        """The :class:`StripesCall` on contiguous input of ``shape`` (N, H, W, Cin) and
        ``dtype`` making ``channels`` channels, made once for each."""
        key = (shape, dtype, channels, stride, padding, form)
        found = self._calls.get(key)
        if found is None:
            found = self._calls[key] = StripesCall(self, shape, channels, stride, padding, form)
        return found

    def kernels(self, x: np.ndarray, taps: np.ndarray, bias: np.ndarray, out: np.ndarray, buffer: np.ndarray,
                finish: tuple) -> StripesKernels:
        """The walk and its two kernels for input of ``x``'s type and output of ``out``'s, made on
        the first call."""
        key = (x.dtype, out.dtype)
        found = self._kernels.get(key)
        if found is None:
            with _MAKING:       # another thread may have made it while this one waited
                found = self._kernels.get(key) or self._make(x, taps, bias, out, buffer, finish)
        return found

    def _make(self, x: np.ndarray, taps: np.ndarray, bias: np.ndarray, out: np.ndarray, buffer: np.ndarray,
              finish: tuple) -> StripesKernels:
        rows, parts, stored = np.empty((0, 0), x.dtype), np.empty((1, 4), np.int64), buffer[0]
        floats = self.dot >= len(DOT_BLOCKS)
        product = KernelAddress(BLOCKS[self.dot], rows, self.packed, parts, 0, 0, (0, 0), self.bias, stored, stored,
                                self.numbers) if floats else \
            KernelAddress(BLOCKS[self.dot], rows, self.packed, self.strip_bytes, parts, 0, 0, (0, 0), self.correction,
                          self.scale, self.bias, stored, stored, self.numbers)
        depthwise = KernelAddress(self.depthwise.kernel, buffer, 0, 0, taps, bias, out, 0, 0, 0, 0, 0, 0, 0, *finish,
                                  empty((0, 0, LANES)))
        walk = KernelAddress(stripes_walk(floats), product.address, product.type, depthwise.address, depthwise.type,
                             x, self.packed, self.strip_bytes, self.correction, self.scale, self.bias, self.numbers, 0,
                             taps, bias, out, 0, 0, 0, 0, 0, 0, 0, 0, *finish, 0, buffer)
        found = self._kernels[x.dtype, out.dtype] = (walk, product, depthwise)
        return found


class StripesCall:
    """:func:`pointwise_depthwise` through :class:`TiledStripes` on input of one shape and type
    (bound once per input shape): the output's shape and form and the work, and for each number of
    threads the parts and :func:`stripes_parts`' other arguments, made once, so that a call
    costs a new output and the hand-off."""

    def __init__(self, stripes: TiledStripes, shape: tuple[int, int, int, int], channels: int,
                 stride: tuple[int, int], padding: Padding, form: Form | None):
        self.out_shape, self.work = stripes_geometry(shape, stripes.depthwise.taps.shape[:2], channels, stride,
                                                     padding)
        self.form = form
        self._stripes, self._stride, self._padding = stripes, stride, padding
        self._finish = stripes.depthwise.finish(form)
        self._heads: dict[int, _StripesHead] = {}

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The new output (N, OH, OW, C) from the contiguous input pixels ``x``, each part
        walked down its stripes in compiled code by whichever of the run's threads takes it."""
        out = output_array(self.out_shape, self.form)
        threads = threads_for(self.work)
        head = self._heads.get(threads) or self._head(x, out, threads)
        _STRIPES_PARTS.run(head.count, self.work, (*head.before, x, *head.between, out, *head.after,
                                                   scratch(head.scratch), head.slot, 0), (), head.kinds)
        return out

    def _head(self, x: np.ndarray, out: np.ndarray, threads: int) -> _StripesHead:
        """The parts on ``threads`` threads, as a table (:func:`stripes_parts`), the memory of
        each thread's buffer, the kernels and the arguments' kinds."""
        stripes, (sh, sw), padding = self._stripes, self._stride, self._padding
        n, h, w, c_in = x.shape
        taps = stripes.depthwise.taps
        kh = taps.shape[0]
        parts = parts_of(n, out.shape[1], out.shape[3], self.work, threads, max(0, kh - sh), sh,
                         FUSED_PARTS_PER_THREAD)
        table = np.empty((len(parts), 7), np.int64)
        for row, (image, first, stop, block) in zip(table, parts):
            stripe, rows = stripe_of(w, block.stop - block.start, kh, sh, h, stop - first)
            row[:] = image, first, stop, block.start, block.stop, stripe, rows
        slot = int((table[:, 6] * w * (table[:, 4] - table[:, 3])).max())
        buffer = np.empty((table[0, 6], w, taps.shape[2]), np.float32)
        walk, product, depthwise = stripes.kernels(x[0], taps, stripes.depthwise.bias, out[0], buffer, self._finish)
        before = (walk.address, walk.type, product.address, product.type, depthwise.address, depthwise.type)
        between = (stripes.packed, stripes.strip_bytes, stripes.correction, stripes.scale, stripes.bias,
                   stripes.numbers, stripes.lanes, taps, stripes.depthwise.bias)
        after = (table, sh, sw, padding[0][0], padding[1][0], *self._finish)
        size = (min(threads, len(table)) * slot,)
        kinds = kinds_of((*before, x, *between, out, *after, scratch(size), slot, 0))
        head = self._heads[threads] = _StripesHead(before, between, after, size, slot, len(table), kinds)
        return head


def stripes_geometry(shape: tuple[int, int, int, int], kernel_size: tuple[int, int], channels: int,
                     stride: tuple[int, int], padding: Padding) -> tuple[tuple[int, int, int, int], int]:
    """The output's shape (N, OH, OW, ``channels``) of :func:`pointwise_depthwise` on input of
    ``shape`` (N, H, W, Cin), and its work in multiply-adds."""
    n, h, w, c_in = shape
    (kh, kw), (sh, sw) = kernel_size, stride
    oh, ow = output_size(h, kh, sh, *padding[0]), output_size(w, kw, sw, *padding[1])
    return (n, oh, ow, channels), n * h * w * c_in * channels + n * oh * ow * channels * kh * kw


def pointwise_depthwise(x: np.ndarray, pointwise: PointwiseRows | TiledStripes, channels: int,
                        depthwise: CompiledDepthwise, stride: tuple[int, int], padding: Padding,
                        form: Form | None = None) -> np.ndarray:
    """``depthwise(pointwise(x))`` of NHWC ``x`` (N, H, W, Cin; any memory layout, float32 or
    the form ``pointwise`` multiplies), where the 1x1 convolution makes ``channels`` channels;
    a new contiguous (N, OH, OW, channels) array, float32, or uint8 in ``form`` if given.
    Each part (an image, a band of a single image's rows or a block of its channels) walks
    down its output rows a stripe at a time:
    the product fills the buffer with the expanded input rows the stripe reads that the
    previous stripe did not, then the depthwise kernel makes the stripe's rows. A product
    on the tiles with the depthwise kernel (:class:`TiledStripes`) runs each part in one
    compiled call; another (:data:`PointwiseRows`) is called per stripe."""
    x = np.ascontiguousarray(x)
    if isinstance(pointwise, TiledStripes):
        return pointwise.call(x.shape, x.dtype, channels, stride, padding, form)(x)
    n, h, w, c_in = x.shape
    kh = depthwise.taps.shape[0]
    sh, top = stride[0], padding[0][0]
    out_shape, work = stripes_geometry(x.shape, depthwise.taps.shape[:2], channels, stride, padding)
    oh, out = out_shape[1], output_array(out_shape, form)
    parts = parts_of(n, oh, channels, work, threads_for(work), max(0, kh - sh), sh, FUSED_PARTS_PER_THREAD)

    def run(part: Part) -> None:
        image, first, stop, block = part
        source = x[image]
        width = block.stop - block.start
        stripe, rows = stripe_of(w, width, kh, sh, h, stop - first)
        buffer = scratch((rows, w, width))
        held_start = held_stop = 0          # the image rows the buffer holds, from its top
        for y in range(first, stop, stripe):
            end, start, finish = stripe_rows(y, stripe, stop, sh, top, kh, h)
            keep = max(0, held_stop - start) if held_start <= start else 0
            if keep:
                buffer[:keep] = buffer[start - held_start:held_stop - held_start]
            if finish > start + keep:
                pointwise(source[start + keep:finish].reshape(-1, c_in), buffer[keep:finish - start].reshape(-1, width),
                          block)
            held_start, held_stop = start, finish
            depthwise.rows(buffer, start, h, out[image], block, y, end, stride, padding, form)

    run_parts(parts, work, run)
    return out
