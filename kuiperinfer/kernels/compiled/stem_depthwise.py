"""A stem computed directly and the depthwise convolution that alone reads it, a stripe of rows
at a time.

MobileNet and EfficientNet open with a convolution of the RGB image, computed directly
(:mod:`.direct`, :mod:`.int8_direct`), whose output only a depthwise convolution reads: the
largest value of the network (32 x 112 x 112 float32, 1.6 MB, in EfficientNet-Lite0), more
than a core's cache. Computed one after the other, the stem writes it whole to memory and the
depthwise convolution reads it back from there: in a run of EfficientNet-Lite0 the depthwise
convolution took twice as long as when called again at once on the same input. Here, as
:func:`~.depthwise.pointwise_depthwise` does after a 1x1 product, the stem makes the rows that
a stripe of the depthwise convolution's output rows reads into a buffer of the thread's, and the
depthwise kernel consumes them while they are in cache; the stem's output never exists whole.
The numbers are the two operators' own: each part makes its rows as the stem makes them.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from kuiperinfer.kernels.compiled.depthwise import (
    _MAKING,
    FUSED_PARTS_PER_THREAD,
    LANES,
    CompiledDepthwise,
    Form,
    Padding,
    compiled_padded_shape,
    compiled_stripe_rows,
    kept_rows,
    output_array,
    output_size,
    parts_of,
    stripe_of,
)
from kuiperinfer.kernels.compiled.direct import CompiledDirect, direct_rows
from kuiperinfer.kernels.jit import AVAILABLE, KernelAddress, empty, inline, kernel, kernel_array, scratch
from kuiperinfer.kernels.parallel import compiled_parts, kinds_of, threads_for

if AVAILABLE:   # the walk exists compiled only, and the int8 stem finishes its sums by the products' epilogue
    from kuiperinfer.kernels.compiled.int8_direct import int8_direct_rows
    from kuiperinfer.kernels.jit import function_at
if TYPE_CHECKING:
    from kuiperinfer.kernels.compiled.int8_direct import CompiledInt8Direct


@inline
def float_stem_rows(x: np.ndarray, offsets: np.ndarray, weight: np.ndarray, bias: np.ndarray, finish: tuple,
                    buffer: np.ndarray, y0: int, y1: int, base: int, geometry: tuple, rows: np.ndarray) -> None:
    """The float32 stem's rows ``y0:y1`` into the ``buffer`` (rows from ``base`` on), ``finish``
    its activation (:func:`~.direct.direct_rows`)."""
    sh, sw, dh, top, left = geometry
    code, a, b = finish
    direct_rows(x, offsets, weight, bias, buffer, y0, y1, base, sh, sw, dh, top, left, rows, code, a, b)


@inline
def int8_stem_rows(x: np.ndarray, offsets: np.ndarray, weight: np.ndarray, bias: np.ndarray, finish: tuple,
                   pixels: np.ndarray, y0: int, y1: int, base: int, geometry: tuple, rows: np.ndarray,
                   thread: int) -> None:
    """The int8 stem's rows ``y0:y1`` into the buffer's ``pixels`` (rows from ``base`` on),
    ``finish`` its scales, epilogue numbers, biases and each thread's sums and values
    (:func:`~.int8_direct.int8_direct_rows`)."""
    sh, sw, dh, top, left = geometry
    scale, numbers, biases, sums, values = finish
    int8_direct_rows(x, offsets, weight, scale, bias, np.empty((0, 0), np.float32), pixels, y0, y1, base, sh, sw, dh,
                     top, left, rows, sums[thread], numbers, biases, values[thread])


@cache
def stem_depthwise_parts(floats: bool) -> Callable[..., None]:
    """The kernel of :class:`StemDepthwise`'s parts, for a float32 stem (:func:`~.direct.direct_rows`)
    where ``floats``, else an int8 one (:func:`~.int8_direct.int8_direct_rows`)."""

    def parts(depthwise_at, depthwise_type, x, offsets, weight, bias, finish, rows, stem, taps,  # noqa: ANN001
              depthwise_bias, out, table, sh, sw, top, left, code, a, b, out_scale, out_zero_point, buffers, slot,
              thread, first, last) -> None:
        """Parts ``first:last``, as the pool's threads take them
        (:class:`~kuiperinfer.kernels.parallel.CompiledParts`): each row of ``table`` (image,
        first and stop output rows, stripe, buffer rows) walked down a stripe at a time: the
        stem's rows the stripe reads that the last one did not, from the image ``x`` through
        thread ``thread``'s scratch ``rows`` (``stem``: its output height and width, stride,
        height dilation, top and left padding; ``finish``: the float32 stem's activation, or the
        int8 stem's scales, epilogue numbers, biases and each thread's sums and values), into
        the thread's ``slot`` values of ``buffers``, then the depthwise kernel at
        ``depthwise_at`` makes the stripe's rows."""
        depthwise = function_at(depthwise_at, depthwise_type)
        h, w, ssh, ssw, sdh, stem_top, stem_left = stem
        k, kh, kw = taps.shape[2], taps.shape[0], taps.shape[1]
        columns_read = (out.shape[2] - 1) * sw + kw
        geometry = (ssh, ssw, sdh, stem_top, stem_left)
        for part in range(first, last):
            image, y0, y1, stripe, height = table[part]
            buffer = buffers[thread * slot:thread * slot + height * w * k].reshape((height, w, k))
            pixels = buffer.reshape((height * w, k))
            held_start = held_stop = 0          # the stem's rows the buffer holds, from its top
            for y in range(y0, y1, stripe):
                end, start, stop = compiled_stripe_rows(y, stripe, y1, sh, top, kh, h)
                keep = kept_rows(pixels, w, start, held_start, held_stop)
                if stop > start + keep:
                    if floats:
                        float_stem_rows(x[image], offsets, weight, bias, finish, buffer, start + keep, stop, start,
                                        geometry, rows[thread])
                    else:
                        int8_stem_rows(x[image], offsets, weight, bias, finish, pixels, start + keep, stop, start,
                                       geometry, rows[thread], thread)
                held_start, held_stop = start, stop
                padded = np.empty(compiled_padded_shape((end - y - 1) * sh + kh, columns_read, k), np.float32)
                depthwise(buffer, start, h, taps, depthwise_bias, out[image], 0, y, end, sh, sw, top, left, code, a,
                          b, out_scale, out_zero_point, padded)

    parts.__qualname__ = f"{'float' if floats else 'int8'}_stem_depthwise_parts"
    return kernel(parts)


class _StemHead(NamedTuple):
    """:func:`stem_depthwise_parts`' arguments that stay the same from call to call of a
    :class:`StemDepthwiseCall` on some number of threads, around those each call makes (the
    image, the stem's ``finish`` and ``rows``, the output, the depthwise kernel's scratch)."""

    before: tuple
    """The depthwise kernel's address and type."""
    stem: tuple
    """The stem's tap offsets into the image, weight and bias."""
    finish: tuple
    """The float32 stem's activation; the int8 stem's scale, epilogue numbers and tiled bias,
    to which each call adds each thread's sums and values (:attr:`values` each)."""
    values: int
    rows: tuple[int, ...]
    """The shape of the stem's gathered rows, a buffer for each thread."""
    around: tuple
    """The stem's geometry, the depthwise taps and bias."""
    after: tuple
    """The parts' table (image, first and end output row, the output rows of a stripe and the
    stem rows of its buffer), the depthwise stride, padding and finish."""
    scratch: tuple[int]
    slot: int
    """Each thread's share of the depthwise kernel's scratch."""
    count: int
    kinds: object
    """:func:`~kuiperinfer.kernels.parallel.kinds_of` the parts' arguments (which hold the
    depthwise kernel's type, which Numba's own dispatch types in Python on every call)."""


class StemDepthwise:
    """A stem computed directly (a float32 :class:`~.direct.CompiledDirect` or an int8
    :class:`~.int8_direct.CompiledInt8Direct` with its epilogue ``numbers``, float32 out), with
    its stride, dilation and zero padding, and the :class:`~.depthwise.CompiledDepthwise`
    convolution of its output, computed a stripe at a time (:func:`stem_depthwise_parts`)."""

    def __init__(self, stem: CompiledDirect | CompiledInt8Direct, stride: tuple[int, int],
                 dilation: tuple[int, int], padding: Padding, depthwise: CompiledDepthwise,
                 numbers: np.ndarray | None = None):
        self.stem, self.stride, self.dilation, self.padding, self.numbers = stem, stride, dilation, padding, numbers
        self.depthwise = depthwise
        self.floats = isinstance(stem, CompiledDirect)
        self.parts = compiled_parts(stem_depthwise_parts(self.floats), per_thread=True)
        self._addresses: dict[np.dtype, KernelAddress] = {}
        self._calls: dict[tuple[object, ...], StemDepthwiseCall] = {}

    def __call__(self, x: np.ndarray, stride: tuple[int, int], padding: Padding,
                 form: Form | None = None) -> np.ndarray:
        """The depthwise convolution (``stride``, zero ``padding``) of the stem's output, from the
        image ``x`` (N, C, H, W; float32, as the stem takes it: the int8 stem's centred values);
        a new contiguous (N, OH, OW, K) array, float32, or uint8 in ``form``."""
        x = kernel_array(x)
        return self.call(x.shape, stride, padding, form)(x)

    def call(self, shape: tuple[int, int, int, int], stride: tuple[int, int], padding: Padding,
             form: Form | None = None) -> StemDepthwiseCall:
        """The :class:`StemDepthwiseCall` on C-contiguous float32 images of ``shape``, made once
        for each."""
        key = (shape, stride, padding, form)
        found = self._calls.get(key)
        if found is None:
            found = self._calls[key] = StemDepthwiseCall(self, shape, stride, padding, form)
        return found

    def address(self, out: np.ndarray, finished: tuple) -> tuple[int, object]:
        """The depthwise kernel's address and type for an output of ``out``'s type, found once."""
        found = self._addresses.get(out.dtype)
        if found is None:
            with _MAKING:
                found = self._addresses.get(out.dtype) or KernelAddress(
                    self.depthwise.kernel, empty((1, 1, out.shape[3])), 0, 0, self.depthwise.taps,
                    self.depthwise.bias, out[0], 0, 0, 0, 0, 0, 0, 0, *finished, empty((0, 0, LANES)))
                self._addresses[out.dtype] = found
        return found.address, found.type


class StemDepthwiseCall:
    """:class:`StemDepthwise` on images of one shape (bound once per input shape): the stem's output
    size, the output's shape and form and the work, and for each number of threads the parts
    and the arguments of :func:`stem_depthwise_parts` that stay the same, made once, so that a
    call costs its new arrays and the hand-off."""

    def __init__(self, walk: StemDepthwise, shape: tuple[int, int, int, int], stride: tuple[int, int],
                 padding: Padding, form: Form | None):
        stem = walk.stem
        self.stem_hw = tuple(output_size(size, d * (taps - 1) + 1, s, *pads) for size, taps, s, d, pads in
                             zip(shape[2:], stem.kernel_size, walk.stride, walk.dilation, walk.padding))
        kh, kw, k = walk.depthwise.taps.shape
        oh = output_size(self.stem_hw[0], kh, stride[0], *padding[0])
        ow = output_size(self.stem_hw[1], kw, stride[1], *padding[1])
        self.out_shape = (shape[0], oh, ow, k)
        self.work = shape[0] * (self.stem_hw[0] * self.stem_hw[1] * stem.weight.shape[1] * stem.weight.shape[0]
                                + oh * ow * k * kh * kw)
        self.form = form
        self._walk, self._stride, self._padding = walk, stride, padding
        self._finished = walk.depthwise.finish(form)
        self._heads: dict[int, _StemHead] = {}

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The new output (N, OH, OW, K) from the C-contiguous float32 images ``x``."""
        out = output_array(self.out_shape, self.form)
        threads = threads_for(self.work)
        head = self._heads.get(threads) or self._head(x, out, threads)
        self._walk.parts.run(head.count, self.work, self._arguments(head, x, out), (), head.kinds)
        return out

    def _arguments(self, head: _StemHead, x: np.ndarray, out: np.ndarray) -> tuple:
        """The arguments of :func:`stem_depthwise_parts` before the parts."""
        finish = head.finish if self._walk.floats else (*head.finish, np.empty(head.values, np.float32),
                                                         np.empty(head.values, np.float32))
        return (*head.before, x, *head.stem, finish, np.empty(head.rows, np.float32), *head.around, out, *head.after,
                scratch(head.scratch), head.slot, 0)

    def _head(self, x: np.ndarray, out: np.ndarray, threads: int) -> _StemHead:
        """The parts on ``threads`` threads and the arguments that stay the same."""
        walk, stride, padding, (h, w) = self._walk, self._stride, self._padding, self.stem_hw
        k, kh = out.shape[3], walk.depthwise.taps.shape[0]
        parts = parts_of(x.shape[0], out.shape[1], k, self.work, threads, 0, stride[0], FUSED_PARTS_PER_THREAD)
        table = np.empty((len(parts), 5), np.int64)
        for row, (image, y0, y1, _) in zip(table, parts):
            row[:] = image, y0, y1, *stripe_of(w, k, kh, stride[0], h, y1 - y0)
        used, slot = min(threads, len(table)), int(table[:, 4].max()) * w * k
        _, _, offsets, scratch_shape = walk.stem.bands(x, self.stem_hw, walk.stride, walk.dilation)
        finish = tuple(walk.stem.code) if walk.floats else (walk.stem.scale, walk.numbers, np.tile(walk.stem.bias, w))
        (top, _), (left, _) = walk.padding
        head = _StemHead(walk.address(out, self._finished), (offsets, walk.stem.weight, walk.stem.bias), finish,
                         (used, w * k), (used, *scratch_shape),
                         ((*self.stem_hw, *walk.stride, walk.dilation[0], top, left), walk.depthwise.taps,
                          walk.depthwise.bias),
                         (table, *stride, padding[0][0], padding[1][0], *self._finished), (used * slot,), slot,
                         len(table), None)
        head = self._heads[threads] = head._replace(kinds=kinds_of(self._arguments(head, x, out)))
        return head
