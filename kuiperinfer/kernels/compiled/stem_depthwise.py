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


class _Plan(NamedTuple):
    """What a :class:`StemDepthwise` call on images of one shape needs beside its arrays."""

    table: np.ndarray
    """The parts (bands of rows: the stem makes every channel): image, first and end output row,
    the output rows of a stripe and the stem rows of its buffer (:func:`~.depthwise.stripe_of`)."""
    slot: int
    """Each thread's share of the depthwise kernel's scratch."""
    used: int
    """The threads that take parts."""
    offsets: np.ndarray
    """The stem's tap offsets into the image."""
    scratch_shape: tuple[int, ...]
    """Each thread's buffer of the stem's gathered rows."""
    biases: np.ndarray
    """The stem's bias repeated across a row (the int8 stem's epilogue)."""
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
        self._addresses: dict[np.dtype, KernelAddress] = {}
        self._plans: dict[tuple[object, ...], _Plan] = {}

    def __call__(self, x: np.ndarray, stride: tuple[int, int], padding: Padding,
                 form: Form | None = None) -> np.ndarray:
        """The depthwise convolution (``stride``, zero ``padding``) of the stem's output, from the
        image ``x`` (N, C, H, W; float32, as the stem takes it: the int8 stem's centred values);
        a new contiguous (N, OH, OW, K) array, float32, or uint8 in ``form``."""
        x = kernel_array(x)
        n = x.shape[0]
        stem_hw = tuple(output_size(size, d * (taps - 1) + 1, s, *pads) for size, taps, s, d, pads in
                        zip(x.shape[2:], self.stem.kernel_size, self.stride, self.dilation, self.padding))
        kh, kw, k = self.depthwise.taps.shape
        oh = output_size(stem_hw[0], kh, stride[0], *padding[0])
        ow = output_size(stem_hw[1], kw, stride[1], *padding[1])
        out = output_array((n, oh, ow, k), form)
        work = self.stem.work(x, stem_hw) + n * oh * ow * k * kh * kw
        threads = threads_for(work)
        key = (x.shape, out.dtype, threads, stride, padding)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._plan(x, stem_hw, out, work, threads, stride, padding, form)
        head = self._head(x, stem_hw, out, plan, stride, padding, form)
        compiled_parts(stem_depthwise_parts(self.floats), per_thread=True).run(len(plan.table), work, head, (),
                                                                             plan.kinds)
        return out

    def _head(self, x: np.ndarray, stem_hw: tuple[int, int], out: np.ndarray, plan: _Plan, stride: tuple[int, int],
              padding: Padding, form: Form | None) -> tuple:
        """The arguments of :func:`stem_depthwise_parts` before the parts."""
        used = plan.used
        rows = np.empty((used, *plan.scratch_shape), np.float32)
        if self.floats:
            finish = tuple(self.stem.code)
        else:
            values = stem_hw[1] * out.shape[3]
            finish = (self.stem.scale, self.numbers, plan.biases, np.empty((used, values), np.float32),
                      np.empty((used, values), np.float32))
        finished = self.depthwise.finish(form)
        (top, _), (left, _) = self.padding
        return (*self._address(out, finished), x, plan.offsets, self.stem.weight, self.stem.bias, finish, rows,
                (*stem_hw, *self.stride, self.dilation[0], top, left), self.depthwise.taps, self.depthwise.bias, out,
                plan.table, *stride, padding[0][0], padding[1][0], *finished, scratch((used * plan.slot,)), plan.slot,
                0)

    def _plan(self, x: np.ndarray, stem_hw: tuple[int, int], out: np.ndarray, work: int, threads: int,
              stride: tuple[int, int], padding: Padding, form: Form | None) -> _Plan:
        """The plan of a call on images of ``x``'s shape, whose stem makes ``stem_hw`` pixels
        into ``out``: made once for each."""
        (h, w), k, kh = stem_hw, out.shape[3], self.depthwise.taps.shape[0]
        parts = parts_of(x.shape[0], out.shape[1], k, work, threads, 0, stride[0], FUSED_PARTS_PER_THREAD)
        table = np.empty((len(parts), 5), np.int64)
        for row, (image, y0, y1, _) in zip(table, parts):
            row[:] = image, y0, y1, *stripe_of(w, k, kh, stride[0], h, y1 - y0)
        _, _, offsets, scratch_shape = self.stem.bands(x, stem_hw, self.stride, self.dilation)
        plan = _Plan(table, int(table[:, 4].max()) * w * k, min(threads, len(table)), offsets, scratch_shape,
                     np.tile(self.stem.bias, w), None)
        return plan._replace(kinds=kinds_of(self._head(x, stem_hw, out, plan, stride, padding, form)))

    def _address(self, out: np.ndarray, finished: tuple) -> tuple[int, object]:
        """The depthwise kernel's address and type for an output of ``out``'s type, found once."""
        found = self._addresses.get(out.dtype)
        if found is None:
            with _MAKING:
                found = self._addresses.get(out.dtype) or KernelAddress(
                    self.depthwise.kernel, empty((1, 1, out.shape[3])), 0, 0, self.depthwise.taps,
                    self.depthwise.bias, out[0], 0, 0, 0, 0, 0, 0, 0, *finished, empty((0, 0, LANES)))
                self._addresses[out.dtype] = found
        return found.address, found.type
