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
product from the CPU's flags and what Numba may compile for it): register tiles of
AVX512-VNNI, AVX2 or AVX512-BF16 (:mod:`kuiperinfer.kernels.compiled.tiles`), of FMAs on
512-bit or 256-bit vectors (:mod:`kuiperinfer.kernels.compiled.float_tiles`), or the NumPy
reference, which any CPU runs (for bf16, in blocks of columns whose weights are widened to
float32 as they are multiplied). A product is cut into blocks of rows and strips of columns that depend on its
shape only, shared among the run's threads (:func:`~kuiperinfer.kernels.parallel.run_parts`);
the outputs are the same at any thread count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kuiperinfer.kernels.compiled.activation import ActivationCode
from kuiperinfer.kernels.compiled.tiles import GROUP_BYTES, target_features
from kuiperinfer.kernels.elementwise import Epilogue, InplaceActivation
from kuiperinfer.kernels.matrix import int8
from kuiperinfer.kernels.matrix.bf16 import round_bf16
from kuiperinfer.kernels.matrix.features import MatrixFeatures, detect
from kuiperinfer.kernels.parallel import run_parts, threads_for

INT8_ACCUMULATION_LIMIT = (2**31 - 1) // (int8.ACTIVATION_STEPS * int8.WEIGHT_LIMIT)
"""The deepest int8 product whose sums fit int32 whatever the values (66,311)."""
PART_WORK = 1 << 20
"""Multiply-adds a block of a product holds at least, where the product has enough."""
MAX_PARTS = 16
"""Blocks a product is cut into at most: enough for two or four threads to share evenly."""


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


REFERENCE = ProductKernel("NumPy reference")
VNNI = ProductKernel("AVX512-VNNI", 0, 4)
AVX2 = ProductKernel("AVX2", 1, 2)
AVX512_BF16 = ProductKernel("AVX512-BF16", 2, 2)
BF16_WIDENED = ProductKernel("float32 products of widened bf16 weights")
FMA512 = ProductKernel("AVX-512 FMA", 3)
FMA256 = ProductKernel("AVX2 FMA", 4)


def int8_kernel(features: MatrixFeatures | None = None, compilable: frozenset[str] | None = None) -> ProductKernel:
    """The int8 kernel for a CPU of ``features`` (this one's by default) where Numba may compile
    the instruction sets ``compilable`` (LLVM's names; this process's by default)."""
    features = features or detect()
    compilable = target_features() if compilable is None else compilable
    if features.avx512_vnni and {"avx512vnni", "avx512bw"} <= compilable:
        return VNNI
    if features.avx2 and "avx2" in compilable:
        return AVX2
    return REFERENCE


def bf16_kernel(features: MatrixFeatures | None = None, compilable: frozenset[str] | None = None) -> ProductKernel:
    """The bf16 kernel for a CPU of ``features`` where Numba may compile ``compilable``
    (as :func:`int8_kernel`)."""
    features = features or detect()
    compilable = target_features() if compilable is None else compilable
    if features.avx512_bf16 and {"avx512bf16", "avx512bw"} <= compilable:
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


def _tile(kernel: ProductKernel) -> tuple[int, int, int]:
    from kuiperinfer.kernels.compiled.products import TILES

    return TILES[kernel.dot]


def pack(weight: np.ndarray, kernel: ProductKernel) -> tuple[np.ndarray, int]:
    """The (K, N) int8, bfloat16 or float32 ``weight`` as ``kernel``'s tiles read it, and the
    bytes of a strip: strips of ``lanes`` columns, one after another; in each, groups of 4
    bytes of K (zeros past K and N), and in each group each column's 4 bytes (for AVX2, the
    columns' first 2 bytes, then their last 2); float32 thus as (strips, K, lanes)."""
    _, _, lanes = _tile(kernel)
    per_group = GROUP_BYTES // weight.itemsize
    k, n = weight.shape
    groups, strips = -(-k // per_group), -(-n // lanes)
    padded = np.zeros((groups * per_group, strips * lanes), weight.dtype)
    padded[:k, :n] = weight
    if kernel is AVX2:
        order = padded.reshape(groups, 2, 2, strips, lanes).transpose(3, 0, 1, 4, 2)
    else:
        order = padded.reshape(groups, per_group, strips, lanes).transpose(2, 0, 3, 1)
    return np.ascontiguousarray(order).reshape(-1).view(np.uint8), groups * GROUP_BYTES * lanes


def _whole_strips(values: np.ndarray, kernel: ProductKernel) -> np.ndarray:
    """A value per column, zeros after the last up to the end of its strip (the tiles read whole strips)."""
    lanes = _tile(kernel)[2]
    return np.concatenate([values, np.zeros(-len(values) % lanes, values.dtype)])


def product_parts(m: int, n: int, k: int, kernel: ProductKernel) -> np.ndarray:
    """The blocks a product of (M, K) by (K, N) is cut into, as rows (start, stop) and strips
    (start, stop): about one per :data:`PART_WORK` multiply-adds, at most :data:`MAX_PARTS`,
    cut along the rows first (each block then reads all of B once), and along whole tiles."""
    rows, strips, lanes = _tile(kernel)
    strip_count = -(-n // lanes)
    count = int(np.clip(m * n * k // PART_WORK, 1, MAX_PARTS))
    row_blocks = max(1, min(count, -(-m // rows)))
    strip_blocks = min(max(1, count // row_blocks), -(-strip_count // strips))
    row_cuts = [rows * (-(-m // rows) * i // row_blocks) for i in range(row_blocks)] + [m]
    strip_cuts = [strips * (-(-strip_count // strips) * i // strip_blocks) for i in range(strip_blocks)]
    strip_cuts.append(strip_count)
    return np.array([(r0, r1, s0, s1) for r0, r1 in zip(row_cuts, row_cuts[1:])
                     for s0, s1 in zip(strip_cuts, strip_cuts[1:])], np.int64)


class _Product:
    """What the products share: the epilogue's arrays, the kernel's call over the blocks of a
    product, shared among the run's threads. A compiled kernel's product sets ``_weights``,
    what its blocks take after the activations."""

    NO_RESIDUAL = np.empty((0, 0), np.float32)
    RESIDUAL_TYPES = (np.float32, np.uint8)

    def __init__(self, k: int, n: int, epilogue: ProductEpilogue, kernel: ProductKernel):
        self.epilogue, self.kernel, self.in_features, self.out_features = epilogue, kernel, k, n
        self._bias = np.zeros(n, np.float32) if epilogue.bias is None else np.array(epilogue.bias, np.float32)
        if self._bias.shape != (n,):
            raise ValueError(f"a product of {n} columns takes a bias of {n}, not {self._bias.shape}")
        self.out_dtype = np.float32 if epilogue.requantize is None else np.uint8
        self._parts: dict[int, np.ndarray] = {}
        """The blocks of a product, per number of rows."""
        self._numbers: dict[tuple[float, int], np.ndarray] = {}
        """The epilogue's numbers per residual scale and zero point."""
        self._weights: tuple = ()
        if kernel.dot is not None:
            from kuiperinfer.kernels.compiled.products import BLOCKS

            self._blocks = BLOCKS[kernel.dot]

    def _epilogue_numbers(self, residual_scale: float, residual_zero_point: int) -> np.ndarray:
        from kuiperinfer.kernels.compiled.products import epilogue_numbers

        requantize = self.epilogue.requantize or Requantize(1.0, 0)
        numbers = epilogue_numbers(ActivationCode.of(self.epilogue.activation),
                                   ActivationCode.of(self.epilogue.residual_activation), residual_scale,
                                   residual_zero_point, requantize.scale, requantize.zero_point)
        self._numbers[(residual_scale, residual_zero_point)] = numbers
        return numbers

    def _residual(self, residual: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
        """``residual`` as the kernels take it (C-contiguous, writable), checked against the output's ``shape``."""
        if residual.shape != shape or residual.dtype not in self.RESIDUAL_TYPES:
            types = " or ".join(np.dtype(t).name for t in self.RESIDUAL_TYPES)
            raise ValueError(f"a residual of a {shape} product is {types} of that shape, "
                             f"not {residual.dtype} {residual.shape}")
        flags = residual.flags
        return residual if flags.c_contiguous and flags.writeable else residual.copy()

    def _compiled(self, a: np.ndarray, residual: np.ndarray | None, residual_scale: float = 1.0,
                  residual_zero_point: int = 0, out: np.ndarray | None = None) -> np.ndarray:
        """The product of the (M, K) ``a`` through the kernel's compiled blocks (into a checked
        ``out`` if given): one call on one thread, else a call per block, the blocks shared
        among the run's threads."""
        m = a.shape[0]
        if out is None:
            out = np.empty((m, self.out_features), self.out_dtype)
        residual = self.NO_RESIDUAL if residual is None else self._residual(residual, out.shape)
        numbers = self._numbers.get((residual_scale, residual_zero_point))
        if numbers is None:
            numbers = self._epilogue_numbers(residual_scale, residual_zero_point)
        parts = self._parts.get(m)
        if parts is None:
            parts = self._parts[m] = product_parts(m, self.out_features, self.in_features, self.kernel)
        work = m * self.out_features * self.in_features // self.kernel.speedup
        blocks, weights, bias = self._blocks, self._weights, self._bias
        if threads_for(work) < 2:
            blocks(a, *weights, parts, 0, len(parts), bias, residual, out, numbers)
            return out

        def run(part: int) -> None:
            blocks(a, *weights, parts, part, part + 1, bias, residual, out, numbers)
        run_parts(range(len(parts)), work, run)
        return out


def _activations(a: np.ndarray, k: int, dtype: type, what: str) -> np.ndarray:
    if a.ndim != 2 or a.shape[1] != k or a.dtype != dtype:
        raise ValueError(f"{what} takes ({k} columns) {np.dtype(dtype)} rows as a 2-D array, not {a.dtype} {a.shape}")
    flags = a.flags
    return a if flags.c_contiguous and flags.writeable else a.copy()


class Int8Product(_Product):
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
        super().__init__(k, n, epilogue, kernel or int8_kernel())
        self.zero_point = int(input_zero_point)
        self.scale = (np.float32(input_scale) * np.asarray(weight_scales, np.float32)).reshape(n)
        if self.kernel.dot is None:
            self.weight = weight
        else:
            self.packed, strip_bytes = pack(weight, self.kernel)
            correction = (self.zero_point * weight.sum(axis=0, dtype=np.int64)).astype(np.int32)
            self._weights = (self.packed, strip_bytes, _whole_strips(correction, self.kernel),
                             _whole_strips(self.scale, self.kernel))

    @classmethod
    def from_float(cls, weight: np.ndarray, input_scale: float, input_zero_point: int,
                   epilogue: ProductEpilogue = NO_EPILOGUE, kernel: ProductKernel | None = None) -> Int8Product:
        """The product of a float32 weight (K, N) quantized per column
        (:func:`~kuiperinfer.kernels.matrix.int8.quantize_weight`)."""
        q, scales = int8.quantize_weight(weight, axis=1)
        return cls(q, scales, input_scale, input_zero_point, epilogue, kernel)

    def __call__(self, a: np.ndarray, residual: np.ndarray | None = None, residual_scale: float = 1.0,
                 residual_zero_point: int = 0) -> np.ndarray:
        """The product of uint8 ``a`` (M, K); a ``residual`` (M, N), float32 or uint8 with its
        scale and zero point, is added as the epilogue says."""
        a = _activations(a, self.in_features, np.uint8, "an int8 product")
        if self.kernel.dot is None:
            return int8_reference(a, self.weight, self.scale, self.zero_point, self.epilogue, residual,
                                  residual_scale, residual_zero_point)
        return self._compiled(a, residual, residual_scale, residual_zero_point)


class _FloatProduct(_Product):
    """A product of float32 activations into float32 outputs (bf16 and float32)."""

    def __init__(self, weight: np.ndarray, epilogue: ProductEpilogue, kernel: ProductKernel, what: str):
        if weight.ndim != 2:
            raise ValueError(f"{what}'s weight is a 2-D array (K, N), not {weight.shape}")
        if epilogue.requantize is not None:
            raise ValueError(f"{what}'s output is float32: it does not requantize")
        super().__init__(*weight.shape, epilogue, kernel)


class Bf16Product(_FloatProduct):
    """``epilogue(bf16(x) @ bf16(weight))`` for float32 ``x`` (M, K), the float32 ``weight``
    (K, N) held as bfloat16, packed once for ``kernel`` (this CPU's by default)."""

    WIDENED_COLUMNS = 256
    """Columns of weights widened to float32 at a time where the CPU has no bf16 products."""

    def __init__(self, weight: np.ndarray, epilogue: ProductEpilogue = NO_EPILOGUE,
                 kernel: ProductKernel | None = None):
        super().__init__(weight, epilogue, kernel or bf16_kernel(), "a bf16 product")
        bits = bf16_bits(np.asarray(weight, np.float32))
        if self.kernel.dot is None:
            self.weight_bits = bits
        else:
            self.packed, strip_bytes = pack(bits, self.kernel)
            self._weights = (self.packed, strip_bytes, np.zeros(self.out_features, np.float32),
                             np.ones(self.out_features, np.float32))

    def __call__(self, x: np.ndarray, residual: np.ndarray | None = None) -> np.ndarray:
        """The product of float32 ``x`` (M, K); a float32 ``residual`` (M, N) is added as the
        epilogue says."""
        x = _activations(x, self.in_features, np.float32, "a bf16 product")
        if self.kernel.dot is None:
            return self._widened(x, residual)
        from kuiperinfer.kernels.compiled.products import round_bf16_bits

        bits = np.empty(x.shape, np.uint16)
        round_bf16_bits(x, bits)
        return self._compiled(bits, residual)

    def _widened(self, x: np.ndarray, residual: np.ndarray | None) -> np.ndarray:
        """:func:`bf16_reference` a block of columns at a time, each block's weights widened to
        float32 as it is multiplied, the blocks shared among the run's threads."""
        rounded = round_bf16(x)
        out = np.empty((len(x), self.out_features), np.float32)
        step = self.WIDENED_COLUMNS

        def columns(start: int) -> None:
            block = slice(start, start + step)
            y = np.matmul(rounded, widen_bf16(self.weight_bits[:, block]))
            epilogue = ProductEpilogue(self._bias[block], self.epilogue.activation, self.epilogue.residual_activation)
            out[:, block] = finish_reference(y, epilogue, None if residual is None else residual[:, block])
        run_parts(range(0, self.out_features, step), out.size * self.in_features, columns)
        return out


class Fp32Product(_FloatProduct):
    """``epilogue(x @ weight)`` for float32 ``x`` (M, K), the float32 ``weight`` (K, N) packed
    once for ``kernel`` (this CPU's by default): register tiles of FMAs, or NumPy's matmul."""

    RESIDUAL_TYPES = (np.float32,)

    def __init__(self, weight: np.ndarray, epilogue: ProductEpilogue = NO_EPILOGUE,
                 kernel: ProductKernel | None = None):
        super().__init__(weight, epilogue, kernel or fp32_kernel(), "a float32 product")
        weight = np.asarray(weight, np.float32)
        if self.kernel.dot is None:
            self.weight = np.array(weight)
        else:
            self.packed = _aligned(pack(weight, self.kernel)[0].view(np.float32))
            self._weights = (self.packed,)
            self._bias = _whole_strips(self._bias, self.kernel)

    def __call__(self, x: np.ndarray, residual: np.ndarray | None = None,
                 out: np.ndarray | None = None) -> np.ndarray:
        """The product of float32 ``x`` (M, K); a float32 ``residual`` (M, N) is added as the
        epilogue says. Into ``out`` if given (float32 (M, N), C-contiguous, not the residual's
        memory: a block of a larger output, say), else a new array."""
        x = _activations(x, self.in_features, np.float32, "a float32 product")
        if out is not None:
            shape = (len(x), self.out_features)
            if out.shape != shape or out.dtype != np.float32 or not (out.flags.c_contiguous and out.flags.writeable):
                raise ValueError(f"a float32 product's out is a writable C-contiguous float32 {shape} array, "
                                 f"not {out.dtype} {out.shape}")
            if residual is not None and np.may_share_memory(out, residual):
                raise ValueError("a float32 product's out and residual must not share memory")
        if self.kernel.dot is None:
            return fp32_reference(x, self.weight, self.epilogue, residual, out)
        return self._compiled(x, residual, out=out)


VECTOR_BYTES = 64
"""The alignment of packed float32 weights: a 512-bit vector, so that no load of a strip
crosses a cache line."""


def _aligned(values: np.ndarray) -> np.ndarray:
    """A copy of the 1-D ``values`` starting at a multiple of :data:`VECTOR_BYTES`."""
    room = np.empty(values.nbytes + VECTOR_BYTES, np.uint8)
    start = -room.ctypes.data % VECTOR_BYTES
    aligned = room[start:start + values.nbytes].view(values.dtype)
    aligned[:] = values
    return aligned
