"""The matrix engine's products: int8, bf16 and float32 weights packed once, one call per
product, the epilogue fused, on the instructions this CPU has.

A layer makes its product when it is built and calls it on every run::

    product = Int8Product(weight_q, weight_scales, input_scale, input_zero_point,
                          ProductEpilogue(bias, activation, requantize=Requantize(0.05, 3)))
    y = product(a)              # (M, K) uint8 -> (M, N) uint8 (float32 without requantize)

    product = Bf16Product(weight, ProductEpilogue(bias, activation))
    y = product(x)              # (M, K) float32 -> (M, N) float32

    product = Fp32Product(weight, ProductEpilogue(bias, activation))
    y = product(x, residual)    # (M, K) float32 -> (M, N) float32

**int8** (:class:`Int8Product`): uint8 activations ``a`` with one zero point, int8 weights
``w`` (K, N), symmetric, one scale per output column. The sums ``sum_k (a - zero_point) w``
are exact integers: the kernels add ``a w`` in int32 and subtract ``zero_point * sum_k w``,
a correction per column made when packing. Then, per column, ``y = acc * scale`` (the
activations' scale times the column's, in float32), ``activation(y + bias)``, with a
residual ``residual_activation(y + residual)``, and float32 out or uint8 requantized
(:class:`ProductEpilogue`). :func:`int8_reference` is the definition in NumPy.

**bf16** (:class:`Bf16Product`): weights held as bfloat16 (half of float32's memory), the
activations rounded to bfloat16 (:func:`~kuiperinfer.kernels.matrix.bf16.round_bf16`), their
products (exact in float32) summed in float32; the same epilogue, float32 out.
:func:`bf16_reference` is the definition in NumPy.

**float32** (:class:`Fp32Product`): ``x @ weight`` then the epilogue, as NumPy computes it
(:func:`fp32_reference`) but for the order of the additions: the same numbers to float32's
rounding, without BLAS's packing of the weight on every call.

**Kernels** (:func:`int8_kernel`, :func:`bf16_kernel`, :func:`fp32_kernel`, chosen once per
product from the CPU's flags and what Numba may compile for it): the AMX tiles of int8 or
bf16 (:mod:`kuiperinfer.kernels.compiled.amx_tiles`; a product of fewer rows than a tile
takes VNNI's or AVX512-BF16's register tiles on the same packed weights), register tiles of
AVX512-VNNI, AVX2 or AVX512-BF16 (:mod:`kuiperinfer.kernels.compiled.tiles`), of FMAs on
512-bit or 256-bit vectors (:mod:`kuiperinfer.kernels.compiled.float_tiles`), or the NumPy
reference, which any CPU runs (for bf16, in blocks of columns whose weights are widened to
float32 as they are multiplied). A product is cut into blocks of rows and strips of
columns that depend on its shape only, shared among the run's threads
(:func:`~kuiperinfer.kernels.parallel.run_parts`); the outputs are the same at any thread
count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from kuiperinfer.kernels.compiled.activation import ActivationCode
from kuiperinfer.kernels.compiled.passes import in_parts
from kuiperinfer.kernels.compiled.tiles import GROUP_BYTES, target_features
from kuiperinfer.kernels.elementwise import Epilogue, InplaceActivation
from kuiperinfer.kernels.matrix import int8
from kuiperinfer.kernels.matrix.bf16 import round_bf16
from kuiperinfer.kernels.matrix.features import MatrixFeatures, detect, request_tile_state
from kuiperinfer.kernels.parallel import PART_WORK, CompiledParts, compiled_parts, kinds_of, run_parts
from kuiperinfer.kernels.resident import resident

INT8_ACCUMULATION_LIMIT = (2**31 - 1) // (int8.ACTIVATION_STEPS * int8.WEIGHT_LIMIT)
"""The deepest int8 product whose sums fit int32 whatever the values (66,311)."""
MAX_PARTS = 16
"""Blocks a product is cut into at most: enough for two or four threads to share evenly."""
EVEN_PARTS = 4
"""Blocks a product of enough work is cut into a multiple of: two or four threads share them evenly."""


@dataclass(frozen=True)
class Requantize:
    """Outputs as uint8: ``clip(rint(y / scale) + zero_point, 0, 255)``."""

    scale: float
    zero_point: int


@dataclass(frozen=True)
class ProductEpilogue:
    """What a product does to its sums before it stores them: ``activation(y + bias)``; with a
    residual given to the call, ``residual_activation(y + residual)``; with ``requantize``,
    uint8 out."""

    bias: np.ndarray | None = None
    activation: InplaceActivation | None = None
    residual_activation: InplaceActivation | None = None
    requantize: Requantize | None = None


NO_EPILOGUE = ProductEpilogue()
"""Sums scaled and stored as float32, nothing more."""


def finish_reference(y: np.ndarray, epilogue: ProductEpilogue, residual: np.ndarray | None = None,
                     residual_scale: float = 1.0, residual_zero_point: int = 0) -> np.ndarray:
    """The epilogue in NumPy, in place on the float32 sums ``y`` (M, N); a uint8 ``residual``
    is dequantized with its scale and zero point."""
    Epilogue(epilogue.bias, epilogue.activation)(y)
    if residual is not None:
        y += int8.dequantize(residual, residual_scale, residual_zero_point) if residual.dtype == np.uint8 else residual
        if epilogue.residual_activation is not None:
            epilogue.residual_activation(y)
    return y if epilogue.requantize is None else int8.quantize(y, epilogue.requantize.scale,
                                                               epilogue.requantize.zero_point)


def int8_sums(a: np.ndarray, weight: np.ndarray, zero_point: int) -> np.ndarray:
    """``(a - zero_point) @ weight`` exactly, as int32: through float64, whose products and
    sums of these integers are exact."""
    return (np.matmul(a.astype(np.float64) - zero_point, weight.astype(np.float64))).astype(np.int32)


def int8_reference(a: np.ndarray, weight: np.ndarray, scale: np.ndarray, zero_point: int,
                   epilogue: ProductEpilogue = NO_EPILOGUE, residual: np.ndarray | None = None,
                   residual_scale: float = 1.0, residual_zero_point: int = 0) -> np.ndarray:
    """The int8 product, the definition: uint8 ``a`` (M, K) with ``zero_point``, int8 ``weight``
    (K, N), float32 ``scale`` (N,) per column; ``(float32(sums) * scale)`` then the epilogue."""
    y = int8_sums(a, weight, zero_point).astype(np.float32)
    y *= scale
    return finish_reference(y, epilogue, residual, residual_scale, residual_zero_point)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 ``x`` rounded to bfloat16, as its uint16 bit patterns."""
    return (round_bf16(x).view(np.uint32) >> 16).astype(np.uint16)


def widen_bf16(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns as float32 values (exact)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def bf16_reference(x: np.ndarray, weight_bits: np.ndarray, epilogue: ProductEpilogue = NO_EPILOGUE,
                   residual: np.ndarray | None = None) -> np.ndarray:
    """The bf16 product, the definition: float32 ``x`` (M, K) rounded to bfloat16 times the
    bfloat16 ``weight_bits`` (K, N), in float32, then the epilogue."""
    return finish_reference(np.matmul(round_bf16(x), widen_bf16(weight_bits)), epilogue, residual)


def fp32_reference(x: np.ndarray, weight: np.ndarray, epilogue: ProductEpilogue = NO_EPILOGUE,
                   residual: np.ndarray | None = None, out: np.ndarray | None = None) -> np.ndarray:
    """The float32 product, the definition: ``x @ weight`` (NumPy's matmul; into ``out`` if
    given), then the epilogue."""
    return finish_reference(np.matmul(x, weight, out=out), epilogue, residual)


# -- the kernels ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ProductKernel:
    """How a product is computed here: ``name`` for people, the code of its compiled tiles
    (:mod:`kuiperinfer.kernels.compiled.products`), or None for the NumPy reference."""

    name: str
    dot: int | None = None
    speedup: int = 1
    """About how many times the float32 product's multiply-adds it does in a given time,
    for how large a product is worth sharing among threads."""
    depth_groups: int = 1
    """The packed weights' groups of 4 bytes of the depth per strip come in a multiple of
    this (the AMX tiles read 16 at a time)."""
    overreach: int = 0
    """Bytes of zeros the packed weights end with, which a tile may read past the last strip
    (an int8 AMX tile reads 16 groups at a time, past a strip's last into the next strip's
    first, which the zeros of A's padded depth multiply: exactly 0 in int8, where bf16 could
    meet an infinite weight, so bf16 pads each strip instead)."""
    narrow: ProductKernel | None = None
    """The kernel that computes a product of fewer rows than :data:`NARROW_ROWS` on the same
    packed weights, faster (the AMX tiles multiply 16 rows at a time)."""


REFERENCE = ProductKernel("NumPy reference")
VNNI = ProductKernel("AVX512-VNNI", 0, 4)
AVX2 = ProductKernel("AVX2", 1, 2)
AVX512_BF16 = ProductKernel("AVX512-BF16", 2, 2)
AMX_INT8 = ProductKernel("AMX-INT8", 3, 8, narrow=VNNI, overreach=16 * GROUP_BYTES * 16)
AMX_BF16 = ProductKernel("AMX-BF16", 4, 8, depth_groups=16)
BF16_WIDENED = ProductKernel("float32 products of widened bf16 weights")
FMA512 = ProductKernel("AVX-512 FMA", 5)
FMA256 = ProductKernel("AVX2 FMA", 6)
AMX_FEATURES = frozenset({"amx-tile", "amx-int8", "amx-bf16", "avx512bw"})
"""LLVM's names of the instruction sets the AMX kernels compile for (their copies of rows
take AVX-512BW's masked loads)."""
AMX_INT8_DEPTH = 64
"""Depth up to which an int8 product is faster on VNNI's tiles than on AMX's, whose tile
reads 64 of it at a time (3136 x 64 x 64: as fast; 12544 x 16 x 64: 0.42 ms against 0.31)."""
NARROW_ROWS = 16
"""Rows from which a product takes its AMX tiles rather than their :attr:`~ProductKernel.narrow`
kernel (a linear layer at batch 1 takes 0.015 ms on VNNI, 0.022 on AMX). Only int8 has one:
its sums are exact on either, where bf16's float32 sums would change with the batch size."""


def int8_kernel(features: MatrixFeatures | None = None, compilable: frozenset[str] | None = None,
                depth: int | None = None) -> ProductKernel:
    """The int8 kernel for a CPU of ``features`` (this one's by default) where Numba may compile
    the instruction sets ``compilable`` (LLVM's names; this process's by default), for a
    product of ``depth`` (K; any by default)."""
    features = features or detect()
    compilable = target_features() if compilable is None else compilable
    vnni = features.avx512_vnni and {"avx512vnni", "avx512bw"} <= compilable
    if features.amx_int8 and vnni and AMX_FEATURES <= compilable and (depth is None or depth > AMX_INT8_DEPTH) \
            and request_tile_state():
        return AMX_INT8
    if vnni:
        return VNNI
    if features.avx2 and "avx2" in compilable:
        return AVX2
    return REFERENCE


def bf16_kernel(features: MatrixFeatures | None = None, compilable: frozenset[str] | None = None) -> ProductKernel:
    """The bf16 kernel for a CPU of ``features`` where Numba may compile ``compilable``
    (as :func:`int8_kernel`)."""
    features = features or detect()
    compilable = target_features() if compilable is None else compilable
    avx512_bf16 = features.avx512_bf16 and {"avx512bf16", "avx512bw"} <= compilable
    if features.amx_bf16 and avx512_bf16 and AMX_FEATURES <= compilable and request_tile_state():
        return AMX_BF16
    if avx512_bf16:
        return AVX512_BF16
    return BF16_WIDENED


def fp32_kernel(features: MatrixFeatures | None = None, compilable: frozenset[str] | None = None) -> ProductKernel:
    """The float32 kernel for a CPU of ``features`` where Numba may compile ``compilable``
    (as :func:`int8_kernel`)."""
    features = features or detect()
    compilable = target_features() if compilable is None else compilable
    if features.avx512f and "avx512f" in compilable:
        return FMA512
    if features.avx2 and features.fma and {"avx2", "fma"} <= compilable:
        return FMA256
    return REFERENCE


def tile_shape(kernel: ProductKernel) -> tuple[int, int, int]:
    """The rows, strips and columns per strip of the register tile of a compiled ``kernel``."""
    from kuiperinfer.kernels.compiled.products import TILES

    return TILES[kernel.dot]


def pack(weight: np.ndarray, kernel: ProductKernel) -> tuple[np.ndarray, int]:
    """The (K, N) int8, bfloat16 or float32 ``weight`` as ``kernel``'s tiles read it, and the
    bytes of a strip: strips of ``lanes`` columns, one after another; in each, groups of 4
    bytes of K (zeros past K and N), and in each group each column's 4 bytes (for AVX2, the
    columns' first 2 bytes, then their last 2); float32 thus as (strips, K, lanes); the groups
    padded with zeros to the kernel's :attr:`~ProductKernel.depth_groups`, and its
    :attr:`~ProductKernel.overreach` of zeros after the last strip. In the
    weights' arena (:func:`~kuiperinfer.kernels.resident.resident`), on a cache line."""
    _, _, lanes = tile_shape(kernel)
    per_group = GROUP_BYTES // weight.itemsize
    k, n = weight.shape
    groups, strips = -(-k // per_group), -(-n // lanes)
    groups += -groups % kernel.depth_groups
    padded = np.zeros((groups * per_group, strips * lanes), weight.dtype)
    padded[:k, :n] = weight
    if kernel is AVX2:
        order = padded.reshape(groups, 2, 2, strips, lanes).transpose(3, 0, 1, 4, 2)
    else:
        order = padded.reshape(groups, per_group, strips, lanes).transpose(2, 0, 3, 1)
    if kernel.overreach:
        order = np.concatenate([np.ascontiguousarray(order).reshape(-1).view(np.uint8),
                                np.zeros(kernel.overreach, np.uint8)])
    return resident(order).reshape(-1).view(np.uint8), groups * GROUP_BYTES * lanes


def whole_strips(values: np.ndarray, kernel: ProductKernel) -> np.ndarray:
    """A value per column, zeros after the last up to the end of its strip (the tiles read whole strips)."""
    lanes = tile_shape(kernel)[2]
    return np.concatenate([values, np.zeros(-len(values) % lanes, values.dtype)])


def product_parts(m: int, n: int, k: int, kernel: ProductKernel, columns: tuple[int, int] | None = None) -> np.ndarray:
    """The blocks a product of (M, K) by (K, N) (or its ``columns``, start and stop) is cut
    into, as rows (start, stop) and strips (start, stop), along whole tiles: about one per
    :data:`PART_WORK` multiply-adds, at most :data:`MAX_PARTS`, in a multiple of
    :data:`EVEN_PARTS` from half of it up, or at least half as many; of those cuts, the one that
    reads the fewest values, since each block of rows reads all of B's columns and each block
    of columns all of A's rows. A convolution's many pixels by few channels is cut along its
    rows; a sentence of tokens by a large weight along its columns, the weight read once.
    The largest blocks come first, so that threads taking the next block as they come free
    end together (blocks of 6 strips after those of 4 left one thread the two largest)."""
    rows, strips, lanes = tile_shape(kernel)
    start, stop = columns or (0, n)
    first = start // lanes
    strip_count = -(-stop // lanes) - first
    count = int(np.clip(m * (stop - start) * k // PART_WORK, 1, MAX_PARTS))
    if count > EVEN_PARTS:
        count -= count % EVEN_PARTS
    elif count > EVEN_PARTS // 2:
        count = EVEN_PARTS          # three parts would leave one of two threads twice the other's work
    row_tiles, panels = -(-m // rows), -(-strip_count // strips)
    cuts = [(r, min(max(1, count // r), panels)) for r in range(1, max(1, min(count, row_tiles)) + 1)]
    wanted = min(count, max(r * c for r, c in cuts))
    even = [(r, c) for r, c in cuts if r * c >= wanted or (r * c % EVEN_PARTS == 0 and 2 * r * c >= wanted)]
    row_blocks, strip_blocks = min(even, key=lambda cut: cut[0] * (stop - start) + cut[1] * m)
    row_cuts = [rows * (row_tiles * i // row_blocks) for i in range(row_blocks)] + [m]
    strip_cuts = [first + strips * (panels * i // strip_blocks) for i in range(strip_blocks)]
    strip_cuts.append(first + strip_count)
    parts = [(r0, r1, s0, s1) for r0, r1 in zip(row_cuts, row_cuts[1:]) for s0, s1 in zip(strip_cuts, strip_cuts[1:])]
    parts.sort(key=lambda part: (part[1] - part[0]) * (part[3] - part[2]), reverse=True)   # the largest first
    return np.array(parts, np.int64)


def in_layout(x: np.ndarray, dtype: type, fill: Any, *numbers: Any) -> np.ndarray:
    """The compiled pass ``fill(values, *numbers, out)`` over ``x`` as one C-contiguous run of
    memory (its axes ordered by their strides: a channels-last view's NHWC array), into a new
    array of ``dtype`` in the memory layout of ``x``; large arrays in compiled parts shared
    among the run's threads."""
    if x.flags.c_contiguous:
        order = inverse = None
    elif x.ndim == 4 and x.strides[1] == x.itemsize and x.strides[2] >= x.strides[3] >= x.strides[1] * x.shape[1]:
        order, inverse = (0, 2, 3, 1), (0, 3, 1, 2)    # a channels-last view, known without sorting
    else:
        order = np.argsort(x.strides, kind="stable")[::-1]
        inverse = np.argsort(order)
    values = (x if order is None else np.ascontiguousarray(x.transpose(order))).reshape(-1)
    out = np.empty(values.size, dtype)
    if values.size >= ELEMENTWISE_SHARED:
        count = min(MAX_PARTS, values.size // ELEMENTWISE_PART)
        count = max(2, count - count % 2)    # two threads share an even count evenly
        step = -(-values.size // count)
        compiled_parts(in_parts(fill)).run(count, ELEMENTWISE_WORK * values.size, (values, numbers, step), (out,))
    else:
        fill(values, *numbers, out)
    if order is None:
        return out.reshape(x.shape)
    return out.reshape([x.shape[i] for i in order]).transpose(inverse)


def quantize_activations(x: np.ndarray, scale: float, zero_point: int, compiled: bool) -> np.ndarray:
    """float32 ``x`` (any shape and memory layout) quantized to uint8 with ``scale`` and
    ``zero_point`` as an int8 product's activations are, in the same layout: by the compiled
    quantizer (large arrays shared among the run's threads), else by NumPy's reference."""
    x, scale = np.asarray(x, np.float32), np.float32(scale)
    if not compiled:
        return int8.quantize(x, scale, zero_point)
    from kuiperinfer.kernels.compiled.products import quantize_values

    return in_layout(x, np.uint8, quantize_values, scale, np.float32(zero_point))


ELEMENTWISE_SHARED = 1 << 17
"""Values from which an elementwise pass (quantizing, rounding) is cut into parts the run's
threads share, in compiled calls (quantizing 400,000 values on an AMX Xeon: 0.093 ms on one
thread, 0.05 on two)."""
ELEMENTWISE_PART = 1 << 16
"""Values an elementwise part (quantizing, rounding) holds at least."""
ELEMENTWISE_WORK = 8
"""Multiply-adds an elementwise value counts as when deciding whether to share it among threads."""


class IndirectRows(NamedTuple):
    """The rows of a product's A read where they lie (an indirect convolution's windows):
    row ``m`` is, tap after tap, ``tap_bytes`` bytes (a multiple of 4) of ``source`` from
    its byte ``offsets[m, tap]`` on, or of ``fill`` where that offset is negative (padding).
    ``offsets`` is a C-contiguous int32 (M, taps) array (int64 for a source of 2 GiB or more),
    ``source`` and ``fill`` C-contiguous arrays of the product's input type."""

    offsets: np.ndarray
    source: np.ndarray
    fill: np.ndarray
    tap_bytes: int

    @property
    def shape(self) -> tuple[int, int]:
        """(M, K), as the rows' matrix would be."""
        return len(self.offsets), self.offsets.shape[1] * self.tap_bytes // self.source.itemsize


class _Blocks(NamedTuple):
    """How a product of so many rows into so many columns is computed, made once for each."""

    parts: np.ndarray
    """Its blocks (:func:`product_parts`)."""
    work: int
    """Its multiply-adds, as many as the kernel does in the time of one."""
    shared: CompiledParts
    """The kernel over its blocks, shared among the run's threads."""


class Product:
    """What the products share: the epilogue's arrays, the kernel's call over the blocks of a
    product, shared among the run's threads."""

    NO_RESIDUAL = np.empty((0, 0), np.float32)
    RESIDUAL_TYPES = (np.float32, np.uint8)
    in_features: int
    in_dtype: type
    """The form :meth:`activations` gives."""
    zero: int = 0
    """The value of 0.0 in that form (what padding is)."""

    def __init__(self, n: int, epilogue: ProductEpilogue, kernel: ProductKernel):
        if kernel in (AMX_INT8, AMX_BF16) and not request_tile_state():
            raise ValueError(f"{kernel.name} needs the AMX tiles, which this CPU or Linux does not give this process")
        self.epilogue, self.kernel, self.out_features = epilogue, kernel, n
        self._bias = np.zeros(n, np.float32) if epilogue.bias is None else np.array(epilogue.bias, np.float32)
        if self._bias.shape != (n,):
            raise ValueError(f"a product of {n} columns takes a bias of {n}, not {self._bias.shape}")
        requantize = epilogue.requantize or Requantize(1.0, 0)
        self._numbers = (ActivationCode.of(epilogue.activation), ActivationCode.of(epilogue.residual_activation),
                         requantize.scale, requantize.zero_point)
        self.out_dtype = np.float32 if epilogue.requantize is None else np.uint8
        self._blocks: dict[tuple[int, int, int], _Blocks] = {}
        self._bound: dict[tuple[object, ...], ProductCall] = {}
        self._epilogue_numbers: dict[tuple[float, int], np.ndarray] = {}
        if kernel.dot is not None:
            from kuiperinfer.kernels.compiled import products as compiled_products

            self._compiled_products = compiled_products

    @property
    def nbytes(self) -> int:
        """Bytes of the weights the product holds (packed, or as the reference takes them)."""
        return self.packed.nbytes

    @property
    def reads_indirect_rows(self) -> bool:
        """Whether :meth:`multiply` takes :class:`IndirectRows` (the integer and bf16 dots' tiles do)."""
        return self.kernel in (VNNI, AVX2, AVX512_BF16, AMX_INT8, AMX_BF16)

    def activations(self, x: np.ndarray) -> np.ndarray:
        """float32 ``x`` (any shape and memory layout) in the form the product multiplies,
        in the same layout."""
        raise NotImplementedError

    def __call__(self, a: np.ndarray, residual: np.ndarray | None = None, residual_scale: float = 1.0,
                 residual_zero_point: int = 0) -> np.ndarray:
        """The product of ``a`` (M, K), float32 or already in the form :meth:`activations`
        gives; a ``residual`` (M, N), float32 or uint8 with its scale and zero point, is added
        as the epilogue says."""
        a = self.activations(a)
        k = self.in_features
        if a.ndim != 2 or a.shape[1] != k:
            raise ValueError(f"a product of {k} rows takes (M, {k}) activations, not {a.dtype} {a.shape}")
        a = a if a.flags.c_contiguous and a.flags.writeable else a.copy()
        out = np.empty((len(a), self.out_features), self.out_dtype)
        self.multiply(a, out, residual, residual_scale, residual_zero_point)
        return out

    def multiply(self, a: np.ndarray, out: np.ndarray, residual: np.ndarray | None = None,
                 residual_scale: float = 1.0, residual_zero_point: int = 0, columns: tuple[int, int] | None = None,
                 shared: bool = True) -> None:
        """``out`` = the product of ``a`` (M, K), C-contiguous, in the form :meth:`activations`
        gives (or, on compiled tiles, :class:`IndirectRows` of that form), or its ``columns``
        (start, stop), which ``out`` (M, stop - start) and the ``residual`` then hold; the
        blocks shared among the run's threads unless ``shared`` is False (a caller that shares
        its own parts)."""
        start, stop = columns or (0, self.out_features)
        m = a.shape[0]
        if out.shape != (m, stop - start) or out.dtype != self.out_dtype:
            raise ValueError(f"the product of {m} rows and columns {start}:{stop} goes to a "
                             f"{np.dtype(self.out_dtype)} {(m, stop - start)} array, not {out.dtype} {out.shape}")
        if isinstance(a, IndirectRows) and not self.reads_indirect_rows:
            raise ValueError(f"a product on {self.kernel.name} takes its rows as a matrix, not as indirect rows")
        if residual is not None and (residual.shape != out.shape or residual.dtype not in self.RESIDUAL_TYPES):
            types = " or ".join(np.dtype(t).name for t in self.RESIDUAL_TYPES)
            raise ValueError(f"a residual of a {out.shape} product is {types} of that shape, "
                             f"not {residual.dtype} {residual.shape}")
        if self.kernel.dot is None:
            epilogue = ProductEpilogue(self._bias[start:stop], self.epilogue.activation,
                                       self.epilogue.residual_activation, self.epilogue.requantize)
            self._reference(a, out, slice(start, stop), epilogue, residual, residual_scale, residual_zero_point,
                            shared)
        elif out.flags.c_contiguous:
            self._compiled(a, out, (start, stop), residual, residual_scale, residual_zero_point, shared)
        else:   # a group's channels of a convolution's output
            whole = np.empty(out.shape, out.dtype)
            self._compiled(a, whole, (start, stop), residual, residual_scale, residual_zero_point, shared)
            out[...] = whole

    def _reference(self, a: np.ndarray, out: np.ndarray, columns: slice, epilogue: ProductEpilogue,
                   residual: np.ndarray | None, residual_scale: float, residual_zero_point: int,
                   shared: bool) -> None:
        raise NotImplementedError

    def _compiled(self, a: np.ndarray, out: np.ndarray, columns: tuple[int, int], residual: np.ndarray | None,
                  residual_scale: float, residual_zero_point: int, shared: bool) -> None:
        m, k = a.shape
        if residual is None:
            residual = self.NO_RESIDUAL
        elif not (residual.flags.c_contiguous and residual.flags.writeable):
            residual = residual.copy()
        numbers = self.epilogue_numbers(residual_scale, residual_zero_point)
        blocks = self.blocks(m, columns)
        head, tail = self._block_arguments(a, blocks.parts, columns, residual, out, numbers)
        if shared:
            blocks.shared.run(len(blocks.parts), blocks.work, head, tail)
        else:
            blocks.shared.dispatcher(*head, 0, len(blocks.parts), *tail)

    def call(self, shape: tuple[int, ...], dtype: np.dtype, residual: type | None = None,
             residual_scale: float = 1.0, residual_zero_point: int = 0) -> ProductCall:
        """The :class:`ProductCall` on compiled tiles for C-contiguous activations of ``shape``
        (..., K) and ``dtype``, with a residual of type ``residual`` (float32 or uint8, of this
        scale and zero point) or none, made once for each."""
        key = (shape, dtype, residual, residual_scale, residual_zero_point)
        found = self._bound.get(key)
        if found is None:
            found = self._bound[key] = ProductCall(self, shape, dtype, residual, residual_scale, residual_zero_point)
        return found

    def blocks(self, m: int, columns: tuple[int, int]) -> _Blocks:
        """The blocks of a product of ``m`` rows into ``columns`` and their kernel, made once
        for each."""
        key = (m, *columns)
        found = self._blocks.get(key)
        if found is None:
            found = self._blocks[key] = self._blocks_of(m, self.in_features, columns)
        return found

    def _blocks_of(self, m: int, k: int, columns: tuple[int, int]) -> _Blocks:
        """The blocks of a product of ``m`` rows into ``columns`` and their kernel (the narrow
        one for few rows, where there is one)."""
        kernel = self.kernel if m >= NARROW_ROWS or self.kernel.narrow is None else self.kernel.narrow
        return _Blocks(product_parts(m, self.out_features, k, kernel, columns),
                       m * (columns[1] - columns[0]) * k // kernel.speedup,
                       compiled_parts(self._compiled_products.BLOCKS[kernel.dot]))

    def epilogue_numbers(self, residual_scale: float = 1.0, residual_zero_point: int = 0) -> np.ndarray:
        """The compiled epilogue's numbers (:func:`~kuiperinfer.kernels.compiled.products.epilogue_numbers`)
        for a residual of this scale and zero point, made once for each."""
        numbers = self._epilogue_numbers.get((residual_scale, residual_zero_point))
        if numbers is None:
            numbers = self._epilogue_numbers[(residual_scale, residual_zero_point)] = \
                self._compiled_products.epilogue_numbers(*self._numbers[:2], residual_scale, residual_zero_point,
                                                         *self._numbers[2:])
        return numbers

    def tiles(self) -> tuple[int, np.ndarray, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """What a compiled kernel that calls this product's tiles in a loop of its own takes
        (:func:`~kuiperinfer.kernels.compiled.products.blocks`): the kernel's code, the packed
        weights, the bytes of a strip, the zero points' correction and the scales, the bias and
        the epilogue's numbers (without a residual). Only for a product on compiled tiles."""
        return (self.kernel.dot, *self._tiles, self._bias, self.epilogue_numbers())

    def weight_arguments(self) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """What the compiled product (:data:`~kuiperinfer.kernels.compiled.products.BLOCKS`) takes
        of this product's weights: after A, the packed weights and the bytes of a strip; after
        the columns, the zero points' correction, the scales and the bias. Only for a product
        on compiled tiles."""
        packed, strip_bytes, correction, scale = self._tiles
        return (packed, strip_bytes), (correction, scale, self._bias)

    def _block_arguments(self, a: np.ndarray, parts: np.ndarray, columns: tuple[int, int], residual: np.ndarray,
                         out: np.ndarray, numbers: np.ndarray) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """The compiled tiles' arguments before and after the blocks ``first, last`` of ``parts``
        they make (:class:`~kuiperinfer.kernels.parallel.CompiledParts`)."""
        before, after = self.weight_arguments()
        return (a, *before, parts), (columns, *after, residual, out, numbers)


class ProductCall:
    """:meth:`Product.__call__` on compiled tiles of C-contiguous activations of one shape
    (..., K) and type, float32 or in the form :meth:`Product.activations` gives, with a residual
    of one type or none (bound once per input shape: a linear layer's rows, a 1x1 convolution's pixels),
    without the checks: the blocks, the arguments that stay the same and their kinds, made
    once."""

    def __init__(self, product: Product, shape: tuple[int, ...], dtype: np.dtype, residual: type | None,
                 residual_scale: float, residual_zero_point: int):
        self.rows = math.prod(shape[:-1])
        self.out_shape, self.out_dtype = (*shape[:-1], product.out_features), product.out_dtype
        self._convert = None if np.dtype(dtype) == np.dtype(product.in_dtype) else product.activations
        self._blocks = blocks = product.blocks(self.rows, (0, product.out_features))
        self._numbers = numbers = product.epilogue_numbers(residual_scale, residual_zero_point)
        before, after = product.weight_arguments()
        self._before, self._after = (*before, blocks.parts), ((0, product.out_features), *after)
        rows = np.empty((0, product.in_features), product.in_dtype)
        added = product.NO_RESIDUAL if residual is None else np.empty((0, 0), residual)
        self._kinds = kinds_of((rows, *self._before, *self._after, added, np.empty((0, 0), self.out_dtype), numbers))

    def __call__(self, x: np.ndarray, residual: np.ndarray | None = None) -> np.ndarray:
        """The new C-contiguous output (..., N) of ``x``, adding the C-contiguous, writable
        ``residual`` of its shape, if given."""
        a = x.reshape(self.rows, -1)
        out = np.empty(self.out_shape, self.out_dtype)
        blocks = self._blocks
        blocks.shared.run(len(blocks.parts), blocks.work, (a if self._convert is None else self._convert(a),
                                                           *self._before),
                          (*self._after, Product.NO_RESIDUAL if residual is None else residual.reshape(self.rows, -1),
                           out.reshape(self.rows, -1), self._numbers), self._kinds)
        return out


class Int8Product(Product):
    """``epilogue((a - input_zero_point) @ weight * input_scale * weight_scales)`` for uint8
    ``a`` (M, K), the int8 ``weight`` (K, N) packed once for ``kernel`` (this CPU's by
    default); :attr:`kernel` says which runs."""

    def __init__(self, weight: np.ndarray, weight_scales: np.ndarray, input_scale: float, input_zero_point: int,
                 epilogue: ProductEpilogue = NO_EPILOGUE, kernel: ProductKernel | None = None):
        if weight.ndim != 2 or weight.dtype != np.int8:
            raise ValueError(f"an int8 product's weight is a 2-D int8 array (K, N), not {weight.dtype} {weight.shape}")
        k, n = weight.shape
        if k > INT8_ACCUMULATION_LIMIT:
            raise ValueError(f"an int8 product sums at most {INT8_ACCUMULATION_LIMIT} products in int32, not {k}")
        super().__init__(n, epilogue, kernel or int8_kernel(depth=k))
        self.in_features, self.zero_point, self.in_dtype = k, int(input_zero_point), np.uint8
        self.zero = self.zero_point
        self.input_scale = np.float32(input_scale)
        self.scale = (self.input_scale * np.asarray(weight_scales, np.float32)).reshape(n)
        if self.kernel.dot is None:
            self.weight = self.packed = weight
        else:
            self.packed, strip_bytes = pack(weight, self.kernel)
            correction = (self.zero_point * weight.sum(axis=0, dtype=np.int64)).astype(np.int32)
            self._tiles = (self.packed, strip_bytes,
                           *(whole_strips(v, self.kernel) for v in (correction, self.scale)))

    @classmethod
    def from_float(cls, weight: np.ndarray, input_scale: float, input_zero_point: int,
                   epilogue: ProductEpilogue = NO_EPILOGUE, kernel: ProductKernel | None = None,
                   scales: np.ndarray | None = None) -> Int8Product:
        """The product of a float32 weight (K, N) quantized per column
        (:func:`~kuiperinfer.kernels.matrix.int8.quantize_weight`), by ``scales`` (N,) where given."""
        q, scales = int8.quantize_weight(weight, 1, scales)
        return cls(q, scales, input_scale, input_zero_point, epilogue, kernel)

    def activations(self, x: np.ndarray) -> np.ndarray:
        """``x`` quantized to uint8 by the product's input scale and zero point (uint8 ``x``,
        quantized so already, as it is)."""
        if x.dtype == np.uint8:
            return x
        return quantize_activations(x, self.input_scale, self.zero_point, compiled=self.kernel.dot is not None)

    def _reference(self, a: np.ndarray, out: np.ndarray, columns: slice, epilogue: ProductEpilogue,
                   residual: np.ndarray | None, residual_scale: float, residual_zero_point: int,
                   shared: bool) -> None:
        out[...] = int8_reference(a, self.weight[:, columns], self.scale[columns], self.zero_point, epilogue,
                                  residual, residual_scale, residual_zero_point)


class _FloatProduct(Product):
    """A product of float32 activations into float32 outputs (bf16 and float32)."""

    def __init__(self, weight: np.ndarray, epilogue: ProductEpilogue, kernel: ProductKernel, what: str):
        if weight.ndim != 2:
            raise ValueError(f"{what}'s weight is a 2-D array (K, N), not {weight.shape}")
        if epilogue.requantize is not None:
            raise ValueError(f"{what}'s output is float32: it does not requantize")
        super().__init__(weight.shape[1], epilogue, kernel)
        self.in_features = weight.shape[0]


class Bf16Product(_FloatProduct):
    """``epilogue(bf16(x) @ bf16(weight))`` for float32 ``x`` (M, K), the float32 ``weight``
    (K, N) held as bfloat16, packed once for ``kernel`` (this CPU's by default)."""

    WIDENED_COLUMNS = 256
    """Columns of weights widened to float32 at a time where the CPU has no bf16 products."""

    def __init__(self, weight: np.ndarray, epilogue: ProductEpilogue = NO_EPILOGUE,
                 kernel: ProductKernel | None = None):
        super().__init__(weight, epilogue, kernel or bf16_kernel(), "a bf16 product")
        self.in_dtype = np.float32 if self.kernel.dot is None else np.uint16
        bits = bf16_bits(np.asarray(weight, np.float32))
        if self.kernel.dot is None:
            self.weight_bits = self.packed = bits
        else:
            self.packed, strip_bytes = pack(bits, self.kernel)
            self._tiles = (self.packed, strip_bytes, np.zeros(self.out_features, np.int32),
                           np.ones(self.out_features, np.float32))

    def activations(self, x: np.ndarray) -> np.ndarray:
        """``x`` rounded to bfloat16: as uint16 bit patterns for the bf16 kernels (which pass as
        they are), as float32 values for the widened products."""
        if x.dtype == self.in_dtype == np.uint16:
            return x
        x = np.asarray(x, np.float32)
        if self.kernel.dot is None:
            return round_bf16(x)
        from kuiperinfer.kernels.compiled.products import round_bf16_bits

        return in_layout(x, np.uint16, round_bf16_bits)

    def _reference(self, a: np.ndarray, out: np.ndarray, columns: slice, epilogue: ProductEpilogue,
                   residual: np.ndarray | None, residual_scale: float, residual_zero_point: int,
                   shared: bool) -> None:
        """:func:`bf16_reference` a block of columns at a time, each block's weights widened to
        float32 as it is multiplied, the blocks shared among the run's threads."""
        step, start = self.WIDENED_COLUMNS, columns.start

        def block(first: int) -> None:
            here = slice(first, min(first + step, columns.stop))
            y = np.matmul(a, widen_bf16(self.weight_bits[:, here]))
            part = ProductEpilogue(self._bias[here], epilogue.activation, epilogue.residual_activation)
            target = slice(here.start - start, here.stop - start)
            out[:, target] = finish_reference(y, part, None if residual is None else residual[:, target])
        blocks = range(start, columns.stop, step)
        if shared:
            run_parts(blocks, out.size * self.in_features, block)
        else:
            for first in blocks:
                block(first)


class Fp32Product(_FloatProduct):
    """``epilogue(x @ weight)`` for float32 ``x`` (M, K), the float32 ``weight`` (K, N) packed
    once for ``kernel`` (this CPU's by default): register tiles of FMAs, or NumPy's matmul."""

    RESIDUAL_TYPES = (np.float32,)
    in_dtype = np.float32

    def __init__(self, weight: np.ndarray, epilogue: ProductEpilogue = NO_EPILOGUE,
                 kernel: ProductKernel | None = None):
        super().__init__(weight, epilogue, kernel or fp32_kernel(), "a float32 product")
        weight = np.asarray(weight, np.float32)
        if self.kernel.dot is None:
            self.weight = self.packed = np.array(weight)
        else:
            self.packed = pack(weight, self.kernel)[0].view(np.float32)
            self._bias = whole_strips(self._bias, self.kernel)
            self._lanes = tile_shape(self.kernel)[2]

    def activations(self, x: np.ndarray) -> np.ndarray:
        """``x`` as float32 (float32 ``x`` as it is)."""
        return np.asarray(x, np.float32)

    def multiply(self, a: np.ndarray, out: np.ndarray, residual: np.ndarray | None = None,
                 residual_scale: float = 1.0, residual_zero_point: int = 0, columns: tuple[int, int] | None = None,
                 shared: bool = True) -> None:
        """As :meth:`Product.multiply`; ``out`` may be a block of a larger output (its rows),
        and the residual ``out`` itself (the product is stored into ``out`` before the residual
        is added, so a residual in its memory is copied first); a run of ``columns`` that
        starts within a strip is computed from the strip's start into a new array."""
        start, stop = columns or (0, self.out_features)
        if residual is not None and np.may_share_memory(out, residual):
            residual = residual.copy()
        skip = start % self._lanes if self.kernel.dot is not None else 0
        if not skip:
            super().multiply(a, out, residual, residual_scale, residual_zero_point, columns, shared)
            return
        if out.shape != (len(a), stop - start):
            raise ValueError(f"the product of {len(a)} rows and columns {start}:{stop} goes to a "
                             f"float32 {(len(a), stop - start)} array, not {out.dtype} {out.shape}")
        wider = np.empty((len(a), stop - start + skip), np.float32)
        if residual is not None:
            residual = np.concatenate([np.zeros((len(a), skip), np.float32), residual], axis=1)
        super().multiply(a, wider, residual, residual_scale, residual_zero_point, (start - skip, stop), shared)
        out[...] = wider[:, skip:]

    def _reference(self, a: np.ndarray, out: np.ndarray, columns: slice, epilogue: ProductEpilogue,
                   residual: np.ndarray | None, residual_scale: float, residual_zero_point: int,
                   shared: bool) -> None:
        fp32_reference(a, self.weight[:, columns], epilogue, residual, out)

    def tiles(self) -> tuple[int, np.ndarray, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """As :meth:`Product.tiles` (:func:`~kuiperinfer.kernels.compiled.products.float_blocks`
        takes no strip bytes, correction or scales: 0 and empty arrays)."""
        return (self.kernel.dot, self.packed, 0, np.empty(0, np.int32), np.empty(0, np.float32), self._bias,
                self.epilogue_numbers())

    def weight_arguments(self) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """As :meth:`Product.weight_arguments`: the float32 tiles take the packed weights and the bias."""
        return (self.packed,), (self._bias,)
