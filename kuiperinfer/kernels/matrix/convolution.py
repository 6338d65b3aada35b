"""Convolutions through the matrix engine's products (:mod:`.products`): what a convolution
computes in ``int8`` and ``bf16``.

:class:`ProductConvolution` takes the activations once into the form its products multiply
(uint8, bfloat16), then makes the columns of a stripe of output rows at a time from the
channels-last input, padding included (:mod:`kuiperinfer.kernels.compiled.columns`, or
NumPy's strided windows for the reference), and multiplies them by the packed weight, the
epilogue fused. A 1x1, stride-1 convolution needs no columns: its input pixels are the
rows. Stripes of several images' rows go to the run's threads as parts, each made and
multiplied by one thread while its columns are in cache; a convolution small enough for
one stripe is one product, whose own blocks the threads share. On the compiled integer and
bf16 tiles, a convolution of one group whose pixels' channels fill whole groups of 4 bytes
makes no columns at all: the tiles read each window's pixels where they lie in the input
(:class:`~.products.IndirectRows`, an indirect convolution as onnxruntime's MLAS and XNNPACK
make them), by byte offsets made once per input shape, padding read from a pixel of zero
points. The numbers are the columns' to the bit. Winograd does not apply: the products are
the definition.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kuiperinfer.kernels.compiled.layout import channels_last
from kuiperinfer.kernels.compiled.tiles import GROUP_BYTES
from kuiperinfer.kernels.im2col import output_size, window_view
from kuiperinfer.kernels.jit import KernelAddress, kernel_operand, scratch
from kuiperinfer.kernels.layout import nchw, nhwc, pad_nhwc
from kuiperinfer.kernels.matrix import int8
from kuiperinfer.kernels.matrix.products import (
    AVX2,
    VNNI,
    IndirectRows,
    Int8Product,
    Product,
    ProductCall,
    ProductKernel,
    in_layout,
    tile_shape,
)
from kuiperinfer.kernels.parallel import compiled_parts, even_step, kinds_of, run_parts, threads_for

BLOCK_BYTES = 1 << 20
"""Bytes of columns made and multiplied at a time: a stripe of an image's output rows."""

Padding = tuple[tuple[int, int], tuple[int, int]]


class ProductConvolution:
    """A 2-D convolution whose weight products are ``products``, one per group, each taking
    the columns (kh*kw*Cin/groups, taps (i, j) then channels) to Cout/groups output channels
    with its epilogue; ``compiled`` makes the columns with the compiled kernel (else NumPy's
    strided windows). Calling it on NCHW ``x`` (any memory layout; float32, or already in the
    products' form) gives a new NHWC (N, OH, OW, Cout) array, float32 or, where the products
    requantize, uint8; a ``residual`` (NCHW, Cout channels) is added as their epilogue says."""

    def __init__(self, products: Sequence[Product], kernel: tuple[int, int], stride: tuple[int, int],
                 dilation: tuple[int, int], padding: Padding, padding_mode: str, compiled: bool):
        self.products, self.kernel, self.stride, self.dilation = list(products), kernel, stride, dilation
        self.padding, self.padding_mode, self.compiled = padding, padding_mode, compiled
        first = self.products[0]
        self.in_channels = first.in_features // (kernel[0] * kernel[1]) * len(self.products)
        self.out_channels = first.out_features * len(self.products)
        self.pointwise = (kernel == (1, 1) and stride == (1, 1) and len(self.products) == 1
                          and padding == ((0, 0), (0, 0)))
        """Whether the input pixels are the columns."""
        self.pixel_rows = self.pointwise and compiled and first.kernel.dot is not None
        """Whether the pixels go to the compiled tiles as they are (:meth:`pointwise_call`)."""
        self._fill = first.in_dtype(first.zero)
        """Padding in the products' form."""
        tap_bytes = self.in_channels * np.dtype(first.in_dtype).itemsize
        self.indirect = (compiled and len(self.products) == 1 and not self.pointwise and first.reads_indirect_rows
                         and padding_mode in ("zeros", "constant") and tap_bytes % GROUP_BYTES == 0)
        """Whether the product reads each window's pixels where they lie (:class:`IndirectRows`)
        instead of columns: one group on compiled integer or bf16 tiles, each pixel's channels
        whole groups of 4 bytes, zero padding."""
        self._offsets: dict[tuple[int, ...], np.ndarray] = {}
        self._fill_pixel = np.full(self.in_channels, self._fill)
        """A pixel of padding, which the indirect rows read where a window leaves the input."""
        self._stripes = ColumnStripes(first, kernel, stride, dilation) if (
            compiled and first.kernel.dot is not None and len(self.products) == 1 and not self.pointwise
            and not self.indirect) else None
        """The stripes in compiled parts, on the product's compiled tiles."""

    @property
    def nbytes(self) -> int:
        """Bytes of the weights the products hold."""
        return sum(product.nbytes for product in self.products)

    def __call__(self, x: np.ndarray, residual: np.ndarray | None = None, residual_scale: float = 1.0,
                 residual_zero_point: int = 0) -> np.ndarray:
        first = self.products[0]
        if self.pixel_rows:
            return self._pointwise(x, residual, residual_scale, residual_zero_point)
        a, padding = first.activations(x), self.padding
        if self.padding_mode not in ("zeros", "constant") or not self.compiled:
            a, padding = nchw(pad_nhwc(a, padding, self.padding_mode, self._fill)), ((0, 0), (0, 0))
        a = channels_last(a) if self.compiled else np.ascontiguousarray(nhwc(a))
        n, h, w, c = a.shape
        (top, bottom), (left, right) = padding
        oh, ow = (output_size(size, k, s, d) for size, k, s, d in
                  zip((h + top + bottom, w + left + right), self.kernel, self.stride, self.dilation))
        out = np.empty((n, oh, ow, self.out_channels), first.out_dtype)
        rows = out.reshape(-1, self.out_channels)
        if residual is not None:
            residual = Residual(np.ascontiguousarray(nhwc(residual)).reshape(rows.shape), residual_scale,
                                residual_zero_point)
        if self.pointwise:
            self._multiply(a.reshape(1, -1, c), rows, residual, shared=True)
            return out
        if self.indirect:
            windows = IndirectRows(self._tap_offsets(a.shape, (top, left), (oh, ow)), a, self._fill_pixel,
                                   c * a.itemsize)
            self._multiply([windows], rows, residual, shared=True)
            return out
        depth = first.in_features
        step = max(1, BLOCK_BYTES // (ow * depth * a.itemsize))
        work = rows.size * depth * len(self.products) // first.kernel.speedup
        if n * oh <= step:   # one stripe: one product, its blocks shared
            columns = np.empty((len(self.products), len(rows), depth), a.dtype)
            for image in range(n):
                self._columns(a, (top, left), image, 0, oh, ow, columns[:, image * oh * ow:(image + 1) * oh * ow])
            self._multiply(columns, rows, residual, shared=True)
            return out
        step = even_step(oh, step, threads_for(work), n)
        if self._stripes is not None:
            self._stripes.run(a, (oh, ow), (top, left), rows, residual, step, work)
            return out

        def stripe(part: tuple[int, int]) -> None:
            image, row0 = part
            count = min(step, oh - row0)
            columns = np.empty((len(self.products), count * ow, depth), a.dtype)
            self._columns(a, (top, left), image, row0, count, ow, columns)
            block = slice((image * oh + row0) * ow, (image * oh + row0 + count) * ow)
            self._multiply(columns, rows[block], residual and residual.rows(block), shared=False)
        run_parts([(image, row0) for image in range(n) for row0 in range(0, oh, step)], work, stripe)
        return out

    def _pointwise(self, x: np.ndarray, residual: np.ndarray | None, residual_scale: float,
                   residual_zero_point: int) -> np.ndarray:
        """:meth:`__call__` of a 1x1 convolution on the compiled tiles: the pixels are the columns
        (:meth:`pointwise_call`)."""
        a = channels_last(self.products[0].activations(x))
        if residual is not None:
            residual = kernel_operand(np.ascontiguousarray(nhwc(residual)))
        return self.pointwise_call(a.shape, a.dtype, None if residual is None else residual.dtype, residual_scale,
                                   residual_zero_point)(a, residual)

    def pointwise_call(self, shape: tuple[int, int, int, int], dtype: np.dtype, residual: type | None = None,
                       residual_scale: float = 1.0, residual_zero_point: int = 0) -> ProductCall:
        """The bound call of this 1x1 convolution on the compiled tiles (:attr:`pixel_rows`) for the
        pixels of ``shape`` (N, H, W, C) and ``dtype`` and a residual of type ``residual`` (of
        this scale and zero point) or none: its product's on the pixels (NHWC in and out)."""
        return self.products[0].call(shape, dtype, residual, residual_scale, residual_zero_point)

    def _tap_offsets(self, shape: tuple[int, int, int, int], top_left: tuple[int, int],
                     out_hw: tuple[int, int]) -> np.ndarray:
        """Per output pixel of an NHWC input of ``shape`` (padded by ``top_left`` before its
        first row and column), the byte offset in the input of each of its window's pixels,
        -1 where a tap falls in the padding: (N * OH * OW, kh * kw), made once per shape."""
        key = (*shape, *top_left, *out_hw)
        offsets = self._offsets.get(key)
        if offsets is None:
            n, h, w, c = shape
            (kh, kw), (sh, sw), (dh, dw), (oh, ow) = self.kernel, self.stride, self.dilation, out_hw
            ys = np.arange(oh)[:, None] * sh - top_left[0] + np.arange(kh) * dh        # (OH, kh)
            xs = np.arange(ow)[:, None] * sw - top_left[1] + np.arange(kw) * dw        # (OW, kw)
            inside = ((ys >= 0) & (ys < h))[:, None, :, None] & ((xs >= 0) & (xs < w))[None, :, None, :]
            pixels = ys[:, None, :, None] * w + xs[None, :, None, :]                 # (OH, OW, kh, kw)
            pixels = np.arange(n)[:, None, None, None, None] * (h * w) + pixels
            item = c * np.dtype(self.products[0].in_dtype).itemsize
            wide = n * h * w * item > np.iinfo(np.int32).max   # int32 offsets (half the memory) up to 2 GiB
            offsets = np.where(inside, pixels * item, -1).reshape(n * oh * ow, kh * kw).astype(
                np.int64 if wide else np.int32)
            self._offsets[key] = offsets
        return offsets

    def _columns(self, a: np.ndarray, top_left: tuple[int, int], image: int, row0: int, count: int, ow: int,
                 columns: np.ndarray) -> None:
        """The columns of output rows ``row0`` to ``row0 + count`` of ``image`` of the NHWC
        ``a`` (padded by ``top_left`` before its first row and column), one (count * ow,
        depth) matrix per group."""
        groups = len(columns)
        channels = a.shape[3] // groups
        if self.compiled:
            from kuiperinfer.kernels.compiled.columns import window_columns

            for group in range(groups):
                window_columns(a, image, row0, count, ow, self.kernel, self.stride, self.dilation, top_left,
                               (group * channels, channels), self._fill, columns[group])
            return
        windows = window_view(a[image:image + 1], self.kernel, self.stride, self.dilation, (row0 + count, ow),
                              groups)[0, row0:]
        for group in range(groups):
            columns[group] = windows[:, :, group].reshape(count * ow, -1)

    def _multiply(self, columns: np.ndarray, rows: np.ndarray, residual: Residual | None, shared: bool) -> None:
        """``rows`` = each group's columns times its product, into its output channels."""
        width = self.products[0].out_features
        for group, product in enumerate(self.products):
            part = slice(group * width, (group + 1) * width)
            added = () if residual is None else (residual.values[:, part], residual.scale, residual.zero_point)
            product.multiply(columns[group], rows[:, part], *added, shared=shared)


class ColumnStripes:
    """A single-group convolution's stripes on the compiled tiles of its ``product`` (float32,
    int8 or bf16), each made and multiplied in one compiled call
    (:func:`~kuiperinfer.kernels.compiled.columns.column_stripes`), the product handed in by
    address: the run's threads take the stripes without the GIL."""

    def __init__(self, product: Product, kernel: tuple[int, int], stride: tuple[int, int],
                 dilation: tuple[int, int]):
        from kuiperinfer.kernels.compiled.columns import column_stripes

        self.product = product
        self.before, self.after = product.weight_arguments()
        self.geometry, self.depth = (kernel, stride, dilation), product.in_features
        self.strips = -(-product.out_features // tile_shape(product.kernel)[2])
        self.fill = product.in_dtype(product.zero)
        """Padding in the product's form."""
        self._addresses: dict[tuple[np.dtype, np.dtype], KernelAddress] = {}
        self._parts = compiled_parts(column_stripes, per_thread=True)
        self._tables: dict[tuple[int, int, int], np.ndarray] = {}
        self._kinds: dict[tuple[object, ...], object] = {}
        """:func:`~kuiperinfer.kernels.parallel.kinds_of` the parts' arguments, per type of residual
        and output (they hold the product's type, which Numba's own dispatch types in Python on every call)."""

    def run(self, a: np.ndarray, out_hw: tuple[int, int], top_left: tuple[int, int], rows: np.ndarray,
            residual: Residual | None, step: int, work: int) -> None:
        """``rows`` (N * OH * OW, K) = the convolution of the NHWC ``a`` (in the product's form,
        padded by ``top_left`` before its first row and column), its ``residual`` added, in
        stripes of ``step`` output rows of an image."""
        n, oh = a.shape[0], out_hw[0]
        table = self._tables.get((n, oh, step))
        if table is None:
            table = self._tables[(n, oh, step)] = np.array(
                [(image, row0, min(step, oh - row0)) for image in range(n) for row0 in range(0, oh, step)], np.int64)
        if residual is None:
            added, numbers = self.product.NO_RESIDUAL, self.product.epilogue_numbers()
        else:
            added = kernel_operand(residual.values)
            numbers = self.product.epilogue_numbers(residual.scale, residual.zero_point)
        product = self._address(added, rows)
        slot = step * out_hw[1] * self.depth
        threads = min(threads_for(work), len(table))
        buffers = scratch((-(-threads * slot * a.itemsize // 4),)).view(a.dtype)[:threads * slot]
        head = (product.address, product.type, kernel_operand(a), out_hw, *self.geometry, top_left, self.fill,
                self.before, self.after, added, rows, numbers, self.strips, table, buffers, slot, 0)
        key = (added.dtype, added.ndim, rows.dtype, rows.ndim)
        kinds = self._kinds.get(key)
        if kinds is None:
            kinds = self._kinds[key] = kinds_of(head)
        self._parts.run(len(table), work, head, (), kinds)

    def _address(self, residual: np.ndarray, rows: np.ndarray) -> KernelAddress:
        """The product's compiled blocks for a residual and an output of these types, found once."""
        from kuiperinfer.kernels.compiled.products import BLOCKS

        key = (residual.dtype, rows.dtype)
        address = self._addresses.get(key)
        if address is None:
            a = np.empty((1, self.depth), self.product.in_dtype)
            address = self._addresses[key] = KernelAddress(
                BLOCKS[self.product.kernel.dot], a, *self.before, np.empty((1, 4), np.int64), 0, 0, (0, 0),
                *self.after, residual, rows, self.product.epilogue_numbers())
        return address


class DirectInt8Convolution(ProductConvolution):
    """The int8 convolution of its one ``product`` (an :class:`~.products.Int8Product` on a
    compiled kernel) for an input of few channels and zero padding, computed without its
    columns: the compiled direct convolution
    (:class:`~kuiperinfer.kernels.compiled.int8_direct.CompiledInt8Direct`) of the product's
    uint8 activations by ``weight`` (K, C, kh, kw) quantized as the product quantizes its
    columns, its sums finished by the product's epilogue: the product's numbers to the bit.
    A stem's columns (27 values a pixel for a 3x3 kernel on RGB) cost more to make than to
    multiply; larger kernels and more output channels multiply faster as columns
    (:meth:`pays`)."""

    MAX_TAPS = (1 << 24) // (int8.ACTIVATION_STEPS * int8.WEIGHT_LIMIT)
    """Taps (channels times kernel positions) whose sums float32 holds exactly (518)."""
    MAX_WORK = {VNNI: 1024, AVX2: 512}
    """Per int8 kernel, taps times output channels up to which the direct convolution is
    faster than the product of the columns (docs/performance.md, "int8 stems: direct or
    through their columns")."""

    @classmethod
    def pays(cls, weight_shape: tuple[int, ...], kernel: ProductKernel) -> bool:
        """Whether a (K, C, kh, kw) weight convolves faster directly than through the columns
        that the int8 ``kernel`` multiplies."""
        return int(np.prod(weight_shape)) <= cls.MAX_WORK.get(kernel, 0)

    def __init__(self, product: Int8Product, weight: np.ndarray, stride: tuple[int, int],
                 dilation: tuple[int, int], padding: Padding):
        if weight.shape[1] * weight.shape[2] * weight.shape[3] > self.MAX_TAPS:
            raise ValueError(f"a direct int8 convolution sums at most {self.MAX_TAPS} taps exactly, "
                             f"not {np.prod(weight.shape[1:])}")
        super().__init__([product], weight.shape[2:], stride, dilation, padding, "zeros", compiled=True)
        from kuiperinfer.kernels.compiled.int8_direct import CompiledInt8Direct

        bias = product.epilogue.bias
        self.direct = CompiledInt8Direct(int8.quantize_weight(weight)[0], product.scale,
                                         np.zeros(weight.shape[0], np.float32) if bias is None else bias)

    def __call__(self, x: np.ndarray, residual: np.ndarray | None = None, residual_scale: float = 1.0,
                 residual_zero_point: int = 0) -> np.ndarray:
        product = self.products[0]
        n, _, h, w = x.shape
        (top, bottom), (left, right) = self.padding
        oh, ow = (output_size(size, k, s, d) for size, k, s, d in
                  zip((h + top + bottom, w + left + right), self.kernel, self.stride, self.dilation))
        rows = Product.NO_RESIDUAL if residual is None else \
            np.ascontiguousarray(nhwc(residual)).reshape(n, oh * ow, self.out_channels)
        out = self.direct(self.centred(x), (oh, ow), self.stride, self.dilation, self.padding,
                          product.epilogue_numbers(residual_scale, residual_zero_point), rows, product.out_dtype)
        return out.reshape(n, oh, ow, self.out_channels)

    def centred(self, x: np.ndarray) -> np.ndarray:
        """The product's uint8 activations of ``x`` (float32, or uint8 quantized so already)
        less their zero point, as float32: float32 ``x`` quantized in the same pass."""
        product = self.products[0]
        zero_point = np.float32(product.zero_point)
        if x.dtype == np.uint8:
            return np.subtract(x, zero_point, dtype=np.float32)
        from kuiperinfer.kernels.compiled.int8_direct import centred_values

        scale = np.float32(product.input_scale)
        return in_layout(np.asarray(x, np.float32), np.float32, centred_values, scale, zero_point)


@dataclass(frozen=True)
class Residual:
    """A residual as a product's epilogue adds it: (M, N) rows, float32, or uint8 with its
    scale and zero point."""

    values: np.ndarray
    scale: float = 1.0
    zero_point: int = 0

    def rows(self, block: slice) -> Residual:
        return Residual(self.values[block], self.scale, self.zero_point)
