"""The direct convolution of few input channels (:mod:`.direct`) for int8: the activations
less their zero point and the int8 weight, both held as float32, whose products and sums of a
few input channels' taps are integers float32 holds exactly, then the int8 products' epilogue
(:func:`~.products.finish`; for a float32 output without a residual, its steps in registers as
the sums are stored), so that the numbers are those of the int8 product of the convolution's
columns, to the bit. A module of its own: the products' kernels need Numba, and the float32
direct convolution is imported without it.
"""

from __future__ import annotations

import numpy as np

from kuiperinfer.kernels.compiled.activation import NONE, ZERO, in_registers
from kuiperinfer.kernels.compiled.direct import DirectWeight, padded_rows, row_sums
from kuiperinfer.kernels.compiled.epilogue import requantized
from kuiperinfer.kernels.compiled.products import ACTIVATION, finish
from kuiperinfer.kernels.jit import empty, kernel, kernel_array
from kuiperinfer.kernels.parallel import compiled_parts, threads_for


@kernel
def int8_direct_rows(x: np.ndarray, offsets: np.ndarray, weight: np.ndarray, scale: np.ndarray,
                     bias: np.ndarray, residual: np.ndarray, out: np.ndarray, y0: int, y1: int, base: int, sh: int,
                     sw: int, dh: int, top: int, left: int, rows: np.ndarray, sums: np.ndarray, numbers: np.ndarray,
                     biases: np.ndarray, scratch: np.ndarray) -> None:
    """:func:`~.direct.direct_rows` for int8: ``x`` holds the image's uint8 activations less their zero
    point and ``weight`` the int8 weight, both as float32, whose sums (at most 2^24 in
    magnitude) float32 holds exactly; each output pixel's sums are scaled by ``scale`` (K) in
    registers and finished into ``out`` (OH*OW, K; uint8 or float32) by the int8 products'
    epilogue (:func:`~.products.finish`, its ``numbers``, the ``residual`` (OH*OW, K) or an
    empty array, ``biases`` the bias repeated OW times, ``scratch`` OW*K values): in registers
    too where the output is float32, without a residual, and the activation one that
    :func:`~.activation.in_registers` applies, else from ``sums`` (OW*K): the numbers of the
    int8 product of the convolution's columns, to the bit. ``out``'s (and the residual's) first
    row is output row ``base``'s first pixel (0: the image's whole output; else a block of its
    rows, as :mod:`.direct_depthwise` fills its buffer, without a residual)."""
    k = out.shape[1]
    ow = sums.shape[0] // k
    code, a, b = int(numbers[ACTIVATION]), numbers[ACTIVATION + 1], numbers[ACTIVATION + 2]
    in_place = out.itemsize == 4 and residual.size == 0 and in_registers(code)
    rows[:] = 0
    for y in range(y0, y1):
        padded_rows(x, rows, y, sh, dh, top, left)
        if in_place:
            row_sums(rows, offsets, weight, True, bias, out, (y - base) * ow * k, ow, sw, code, a, b, scale)
            continue
        row_sums(rows, offsets, weight, False, bias, sums, 0, ow, sw, NONE, ZERO, ZERO, scale)
        finish(sums, ow, k, 0, (y - base) * ow, 0, k, 0, bias, residual, out, numbers, True, biases, scratch)


@kernel
def int8_direct_parts(x: np.ndarray, offsets: np.ndarray, weight: np.ndarray, scale: np.ndarray,
                      bias: np.ndarray, residual: np.ndarray, out: np.ndarray, step: int, bands: int, sh: int,
                      sw: int, dh: int, top: int, left: int, rows: np.ndarray, sums: np.ndarray, numbers: np.ndarray,
                      biases: np.ndarray, scratch: np.ndarray, thread: int, first: int, last: int) -> None:
    """Parts ``first:last`` of a :class:`CompiledInt8Direct` call, as the pool's threads take
    them (:class:`~kuiperinfer.kernels.parallel.CompiledParts`): part ``p`` is the band ``p %
    bands`` of ``step`` output rows of image ``p // bands`` (:func:`int8_direct_rows`), through
    thread ``thread``'s ``rows``, ``sums`` and ``scratch``. ``residual`` is (N, OH*OW, K), or
    (1, 0, 0) for none."""
    ow = sums.shape[1] // out.shape[2]
    oh = out.shape[1] // ow
    for part in range(first, last):
        image, y0 = part // bands, part % bands * step
        added = residual[image] if residual.size else residual[0]
        int8_direct_rows(x[image], offsets, weight, scale, bias, added, out[image], y0, min(oh, y0 + step), 0, sh,
                         sw, dh, top, left, rows[thread], sums[thread], numbers, biases, scratch[thread])


@kernel
def centred_values(x: np.ndarray, scale: np.float32, zero_point: np.float32, out: np.ndarray) -> None:
    """``out`` = float32 ``x`` quantized to uint8 (:func:`~.epilogue.requantized`) less the
    ``zero_point``, as float32 (exactly: small integers), in one pass (both C-contiguous)."""
    values, target = x.reshape(-1), out.reshape(-1)
    for i in range(values.size):
        target[i] = requantized(values[i], scale, zero_point) - zero_point


class CompiledInt8Direct(DirectWeight):
    """An int8 convolution weight (K, C, kh, kw) of few input channels as the rows of
    :func:`int8_direct_rows`, with ``scale`` (K), the activations' scale times each output
    channel's weight scale, and ``bias`` (K), for zero padding."""

    def __init__(self, weight: np.ndarray, scale: np.ndarray, bias: np.ndarray):
        if weight.dtype != np.int8:
            raise ValueError(f"an int8 direct convolution's weight is int8, not {weight.dtype}")
        super().__init__(weight)
        self.scale, self.bias = kernel_array(scale), kernel_array(bias)

    def __call__(self, x: np.ndarray, out_hw: tuple[int, int], stride: tuple[int, int],
                 dilation: tuple[int, int], padding: tuple[tuple[int, int], tuple[int, int]],
                 numbers: np.ndarray, residual: np.ndarray, out_dtype: type) -> np.ndarray:
        """The convolution of the NCHW uint8 activations less their zero point ``x`` (float32,
        any memory layout: :func:`centred_values`), finished by the int8 products' epilogue
        ``numbers`` (with the ``residual``, (N, OH*OW, K), or an empty array); a new (N,
        OH*OW, K) array of ``out_dtype`` (uint8 requantizes), bands of its rows shared among
        threads."""
        x = kernel_array(x)
        (oh, ow), k = out_hw, self.weight.shape[1]
        shape = (x.shape[0], oh * ow, k)
        out = np.empty(shape, out_dtype) if out_dtype == np.uint8 else empty(shape)   # float32 on a cache line
        step, bands, offsets, scratch = self.bands(x, out_hw, stride, dilation)
        work = self.work(x, out_hw)
        threads = min(threads_for(work), x.shape[0] * bands)
        rows = np.empty((threads, *scratch), np.float32)
        sums, values = np.empty((threads, ow * k), np.float32), np.empty((threads, ow * k), np.float32)
        added = residual if residual.size else np.empty((1, 0, 0), residual.dtype)
        head = (x, offsets, self.weight, self.scale, self.bias, added, out, step, bands, *stride, dilation[0],
                padding[0][0], padding[1][0], rows, sums, numbers, np.tile(self.bias, ow), values, 0)
        compiled_parts(int8_direct_parts, per_thread=True).run(x.shape[0] * bands, work, head, ())
        return out
