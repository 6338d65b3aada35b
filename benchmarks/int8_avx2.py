"""``python -m benchmarks.int8_avx2``: the ways an AVX2 CPU can multiply uint8 activations by
int8 weights, timed as register tiles, and whether each is exact.

``vpmaddubsw`` multiplies bytes into 16-bit pair sums and saturates them once activations use
all 8 bits (255 * 127 * 2 > 32767). The remedies measured here, each as a tile of the matrix
engine's generator (:func:`kuiperinfer.kernels.compiled.tiles.make_tile`) over the same
register tiles, timed on products of the zoo's sizes, the tiles alone (no epilogue), the
variants alternating, the best of a few rounds:

* ``maddubs`` (not exact, the speed to beat): ``vpmaddubsw`` then ``vpmaddwd`` by ones;
* ``widen`` (the engine's): both operands widened to 16 bits and ``vpmaddwd``, which never
  saturates; the weights held as int8 and sign-extended as they are loaded;
* ``widen, int16 weights``: the same with the weights held as int16 (twice the memory),
  multiplied straight from memory;
* ``split activations``: ``a = 128 h + l`` with ``l`` 7 bits, so that ``vpmaddubsw`` of ``l``
  cannot saturate, and ``h`` (0 or 1) through a second one.

An AVX-512 CPU would fuse the engine's ``vpmaddwd`` and add into ``vpdpwssd``, so the tiles
compile for Haswell's instructions (``NUMBA_CPU_NAME=haswell``), in a process of their own:
this module starts itself again so, and prints a Markdown table.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np

HASWELL = {"NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": "+avx,+avx2,+fma,+bmi2,+f16c"}
SHAPES = [(780, 1152, 192), (3120, 576, 48), (192, 2304, 240)]
"""(M, K, N): ResNet-18's 3x3 convolutions at 28x28 and 56x56 and a 1x1 convolution, rounded
to whole tiles of every variant."""


def _variants():  # noqa: ANN202
    """(name, dot, rows, strips, pack) of each way, its Dot made here."""
    from llvmlite import ir

    from kuiperinfer.kernels.compiled import tiles
    from kuiperinfer.kernels.matrix.products import AVX2, pack

    i8, i16, i32 = ir.IntType(8), ir.IntType(16), ir.IntType(32)

    def madd(builder, pairs, factor):  # noqa: ANN001, ANN202
        ones = ir.Constant(ir.VectorType(i16, 16), [factor] * 16)
        return tiles.call_intrinsic(builder, "llvm.x86.avx2.pmadd.wd", ir.VectorType(i32, 8), pairs, ones)

    def maddubs(builder, a, b):  # noqa: ANN001, ANN202
        return tiles.call_intrinsic(builder, "llvm.x86.avx2.pmadd.ub.sw", ir.VectorType(i16, 16), a, b)

    class BytesDot(tiles.Dot):
        def load_b(self, builder, pointer):  # noqa: ANN001, ANN202
            return tiles._load(builder, pointer, ir.VectorType(i8, 32))

        def broadcast_a(self, builder, word):  # noqa: ANN001, ANN202
            return builder.bitcast(tiles._broadcast(builder, word, 8), ir.VectorType(i8, 32))

    class Saturating(BytesDot):
        def multiply_add(self, builder, acc, a, b):  # noqa: ANN001, ANN202
            return builder.add(acc, madd(builder, maddubs(builder, a, b), 1))

    class SplitActivations(BytesDot):
        def broadcast_a(self, builder, word):  # noqa: ANN001, ANN202
            a = super().broadcast_a(builder, word)
            return (builder.and_(a, ir.Constant(a.type, [0x7F] * 32)),
                    builder.lshr(a, ir.Constant(a.type, [7] * 32)))

        def multiply_add(self, builder, acc, a, b):  # noqa: ANN001, ANN202
            low, high = madd(builder, maddubs(builder, a[0], b), 1), madd(builder, maddubs(builder, a[1], b), 128)
            return builder.add(acc, builder.add(low, high))

    class WideWeights(tiles.Avx2Dot):
        def load_b(self, builder, pointer):  # noqa: ANN001, ANN202
            return [tiles._load(builder, builder.gep(pointer, [ir.Constant(i32, 32 * i)]), ir.VectorType(i16, 16))
                    for i in range(2)]

    def bytes_pack(w):  # noqa: ANN001, ANN202
        k, n = w.shape
        padded = np.zeros((-(-k // 4) * 4, n), np.int8)
        padded[:k] = w
        return np.ascontiguousarray(padded.reshape(-1, 4, n // 8, 8).transpose(2, 0, 3, 1)).view(np.uint8).reshape(-1)

    def wide_pack(w):  # noqa: ANN001, ANN202
        k, n = w.shape
        padded = np.zeros((-(-k // 4) * 4, n), np.int16)
        padded[:k] = w
        order = padded.reshape(-1, 2, 2, n // 8, 8).transpose(3, 0, 1, 4, 2)
        return np.ascontiguousarray(order).view(np.uint8).reshape(-1)

    return [("maddubs (saturates)", Saturating("maddubs", 8, i32, 32), 4, 3, bytes_pack),
            ("widen (the engine's)", tiles.AVX2, 4, 3, lambda w: pack(w, AVX2)[0]),
            ("widen, 4x2 tile", tiles.AVX2, 4, 2, lambda w: pack(w, AVX2)[0]),
            ("widen, int16 weights", WideWeights("wide", 8, i32, 64), 4, 3, wide_pack),
            ("widen, int16 weights, 6x2 tile", WideWeights("wide", 8, i32, 64), 6, 2, wide_pack),
            ("split activations", SplitActivations("split", 8, i32, 32), 4, 3, bytes_pack)]


def _driver(tile, dot: int, rows: int, strips: int):  # noqa: ANN001, ANN202
    """A compiled loop of ``tile``'s over a whole product, no epilogue."""
    import numba

    @numba.njit(nogil=True)
    def product(a, packed, strip_bytes, correction, scale, y):  # noqa: ANN001, ANN202
        for strip in range(0, len(correction) // 8, strips):
            for row in range(0, a.shape[0], rows):
                tile(dot, a, row, rows, packed, strip * strip_bytes, strip_bytes, correction, scale, strip * 8,
                     y[row // rows], 0, strips * 8, rows, strips)
    return product


def measure(rounds: int = 7) -> list[tuple[str, list[float], bool]]:
    """Per variant: GOP/s on each of :data:`SHAPES` (the best of ``rounds`` rounds, the variants
    alternating within each) and whether it is exact at the extremes."""
    from kuiperinfer.kernels.compiled import tiles

    variants = _variants()
    tile = tiles.make_tile(tuple(dot for _, dot, *_ in variants))
    drivers = [_driver(tile, index, rows, strips) for index, (_, _, rows, strips, _) in enumerate(variants)]
    rng = np.random.default_rng(0)
    rates: list[list[float]] = [[] for _ in variants]
    for m, k, n in SHAPES:
        weight, a = rng.integers(-127, 128, (k, n), dtype=np.int8), rng.integers(0, 256, (m, k), dtype=np.uint8)
        calls = []
        for (_, _, rows, _, pack), product in zip(variants, drivers):
            packed = pack(weight)
            y = np.empty((m // rows, rows * n), np.float32)
            calls.append((product, (a, packed, len(packed) // (n // 8), np.zeros(n, np.int32),
                                    np.ones(n, np.float32), y)))
        best = [float("inf")] * len(calls)
        for _ in range(rounds):
            for i, (product, args) in enumerate(calls):
                best[i] = min(best[i], _seconds(product, args))
        for i, seconds in enumerate(best):
            rates[i].append(2 * m * n * k / seconds / 1e9)
    results = []
    for (name, _, rows, strips, pack), product, variant_rates in zip(variants, drivers, rates):
        a, w = np.full((rows, 64), 255, np.uint8), np.full((64, 8 * strips), 127, np.int8)
        y = np.empty((1, rows * strips * 8), np.float32)
        product(a, pack(w), len(pack(w)) // strips, np.zeros(8 * strips, np.int32), np.ones(8 * strips, np.float32), y)
        results.append((name, variant_rates, bool(np.all(y == 255 * 127 * 64))))
    return results


def _seconds(product, args, repeats: int = 20) -> float:  # noqa: ANN001
    start = time.perf_counter()
    for _ in range(repeats):
        product(*args)
    return (time.perf_counter() - start) / repeats


def markdown(results: list[tuple[str, list[float], bool]]) -> str:
    header = " | ".join(f"{m}x{k}x{n} GOP/s" for m, k, n in SHAPES)
    lines = [f"| AVX2 tile (one thread) | exact at 255 x 127 | {header} |", "|---|---|" + "---:|" * len(SHAPES)]
    lines += [f"| {name} | {'yes' if exact else 'no'} | " + " | ".join(f"{r:.0f}" for r in rates) + " |"
              for name, rates, exact in results]
    return "\n".join(lines) + "\n"


def main() -> None:
    if os.environ.get("NUMBA_CPU_NAME") != HASWELL["NUMBA_CPU_NAME"]:
        sys.exit(subprocess.call([sys.executable, "-m", "benchmarks.int8_avx2"], env={**os.environ, **HASWELL}))
    from kuiperinfer.kernels.parallel import blas_threads

    with blas_threads(1):
        print(markdown(measure()), end="")


if __name__ == "__main__":
    main()
