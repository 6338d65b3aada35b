"""AMX tiles: the matrix registers of Intel's Sapphire Rapids and later, from Numba through
LLVM IR that llvmlite builds.

A CPU with AMX has eight tile registers, ``tmm0`` to ``tmm7``, each up to 16 rows of 64
bytes, and instructions that multiply whole tiles: ``tdpbusd`` adds to a tile of 16 x 16
int32 sums the products of a tile of A (16 rows of 64 uint8) and a tile of B (16 rows, each
16 columns' groups of 4 int8), 16,384 multiply-adds in one instruction; ``tdpbf16ps`` the
same for bfloat16 pairs into float32. B's tile is a strip of the matrix engine's packed
weights as the VNNI and AVX512-BF16 tiles read it (groups of 4 bytes, each column's 4
bytes side by side), 16 groups of it: so one packing serves both. A's rows are held with
their depth padded with zeros to whole tiles, so that the groups B's last tile reads past the
depth (padding, or the next strip's first) add nothing.

:func:`tile_product` multiplies up to 32 rows of A, held with their depth padded to whole
tiles (64 bytes) in a buffer of the caller's, by one or two strips of B over the whole
depth, in four tiles of sums (two of A's rows by two strips), and stores the sums into the
caller's buffer of (32, 32) int32 or float32. A thread loads the tiles' shape
(:func:`configure_tiles`, with :func:`tile_config`) before its first product and releases
them (:func:`release_tiles`) after its last; Linux lets a process use the tiles only after
it asked for their state (:func:`~kuiperinfer.kernels.matrix.features.request_tile_state`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kuiperinfer.kernels.jit import AVAILABLE, inline

TILE_ROWS = 16
"""Rows of a tile (of A, B and the sums)."""
TILE_BYTES = 64
"""Bytes of a tile's row: 64 uint8 or 32 bfloat16 of A's depth; 16 sums."""
ROWS = 2 * TILE_ROWS
"""Rows of A one :func:`tile_product` multiplies at most."""
STRIP_COLUMNS = 16
"""Columns of a strip of B, of the sums' tile."""
AHEAD = 2
"""Steps of the depth ahead of the product that it asks for B's tiles (prefetch)."""
INT8, BF16 = 0, 1
"""What a product's tiles multiply: uint8 by int8 into int32 (``tdpbusd``), or bfloat16 pairs
into float32 (``tdpbf16ps``)."""
SUMS, A_TILES, B_TILES = (0, 1, 2, 3), (4, 5), (6, 7)
"""The tile registers: the four tiles of sums (row tile ``r``, strip ``s`` at ``2 r + s``),
the two of A's rows, the two of B's strips."""


@inline
def tile_config() -> np.ndarray:
    """The tiles' shape as ``ldtilecfg`` reads it (64 bytes: palette 1, each tile's bytes per
    row at 16 + 2 t, its rows at 48 + t): all eight 16 rows of 64 bytes."""
    config = np.zeros(64, np.uint8)
    config[0] = 1
    for t in range(8):
        config[16 + 2 * t] = TILE_BYTES
        config[48 + t] = TILE_ROWS
    return config


if AVAILABLE:
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.core.errors import RequireLiteralValue, TypingError
    from numba.extending import intrinsic, overload

    I8, I32, I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
    F32 = ir.FloatType()
    MULTIPLY = {INT8: "llvm.x86.tdpbusd", BF16: "llvm.x86.tdpbf16ps"}

    def _call(builder: Any, name: str, *args: Any) -> None:
        signature = ir.FunctionType(ir.VoidType(), [a.type for a in args])
        function = cgutils.get_or_insert_function(builder.module, signature, name)
        builder.call(function, args)

    def _register(number: int) -> Any:
        return ir.Constant(I8, number)

    def _bytes(context: Any, builder: Any, array_type: Any, value: Any) -> tuple[Any, Any]:
        array = context.make_array(array_type)(context, builder, value)
        return array, builder.bitcast(array.data, I8.as_pointer())

    @intrinsic
    def configure_tiles(typingctx, config):  # noqa: ANN001, ANN201
        """Load the tiles' shape (``ldtilecfg`` of the 64 bytes of :func:`tile_config`)."""
        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            _call(builder, "llvm.x86.ldtilecfg", _bytes(context, builder, signature.args[0], args[0])[1])
            return context.get_dummy_value()
        return types.void(config), codegen

    @intrinsic
    def release_tiles(typingctx):  # noqa: ANN001, ANN201
        """Give the tiles back (``tilerelease``): the thread's tile state returns to its initial
        state, which Linux need not save on a context switch."""
        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            _call(builder, "llvm.x86.tilerelease")
            return context.get_dummy_value()
        return types.void(), codegen

    @intrinsic
    def copy_bytes(typingctx, destination, to, source, at, count):  # noqa: ANN001, ANN201
        """Bytes ``to:to + count`` of the C-contiguous ``destination`` = bytes ``at:at + count``
        of the C-contiguous ``source`` (arrays of any type, offsets in bytes): 64 at a time, the
        rest in one masked load and store (AVX-512BW, which every CPU with AMX has)."""
        if not all(isinstance(array, types.Array) and array.layout == "C" for array in (destination, source)):
            raise TypingError("copy_bytes takes C-contiguous arrays")

        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            target = builder.gep(_bytes(context, builder, signature.args[0], args[0])[1], [args[1]])
            origin = builder.gep(_bytes(context, builder, signature.args[2], args[2])[1], [args[3]])
            count = args[4]
            chunk = ir.VectorType(I8, TILE_BYTES)
            whole = builder.udiv(count, ir.Constant(I64, TILE_BYTES))
            with cgutils.for_range(builder, whole) as loop:
                offset = builder.mul(loop.index, ir.Constant(I64, TILE_BYTES))
                value = builder.load(builder.bitcast(builder.gep(origin, [offset]), chunk.as_pointer()), align=1)
                builder.store(value, builder.bitcast(builder.gep(target, [offset]), chunk.as_pointer()), align=1)
            done = builder.mul(whole, ir.Constant(I64, TILE_BYTES))
            rest = builder.sub(count, done)
            with builder.if_then(builder.icmp_unsigned("!=", rest, ir.Constant(I64, 0))):
                bits = builder.sub(builder.shl(ir.Constant(I64, 1), rest), ir.Constant(I64, 1))
                mask = builder.bitcast(bits, ir.VectorType(ir.IntType(1), TILE_BYTES))
                source_chunk = builder.bitcast(builder.gep(origin, [done]), chunk.as_pointer())
                target_chunk = builder.bitcast(builder.gep(target, [done]), chunk.as_pointer())
                value = builder.call(cgutils.get_or_insert_function(
                    builder.module, ir.FunctionType(chunk, [chunk.as_pointer(), I32, mask.type, chunk]),
                    "llvm.masked.load.v64i8.p0"), [source_chunk, ir.Constant(I32, 1), mask, ir.Constant(chunk, None)])
                builder.call(cgutils.get_or_insert_function(
                    builder.module, ir.FunctionType(ir.VoidType(), [chunk, chunk.as_pointer(), I32, mask.type]),
                    "llvm.masked.store.v64i8.p0"), [value, target_chunk, ir.Constant(I32, 1), mask])
            return context.get_dummy_value()
        return types.void(destination, types.intp, source, types.intp, types.intp), codegen

    @intrinsic(prefer_literal=True)
    def tile_product(typingctx, kind, a, b, b_start, strip_bytes, correction, scale, column, y, y_start,  # noqa: ANN001, ANN201
                     y_stride, valid, row_tiles, strips):
        """The float32 ``y`` from ``y_start + r * y_stride + c`` on, for ``r`` < ``valid`` and
        ``c`` < 16 ``strips``, = the product of row ``r`` of ``a`` (uint8 (32, depth), depth a
        multiple of 64 bytes, rows of bfloat16 as their bytes) and column ``c`` of strips of
        the packed ``b`` (the first at byte ``b_start``, the next ``strip_bytes`` further on);
        int8 sums as ``(acc - correction) * scale`` of their columns from ``column`` on (int32
        and float32 arrays, past the last strip). ``kind``, ``row_tiles`` (1 or 2: tiles of 16
        of A's rows, enough for ``valid``) and ``strips`` (1 or 2) are constants."""
        for name, value in (("kind", kind), ("row_tiles", row_tiles), ("strips", strips)):
            if not isinstance(value, types.IntegerLiteral):
                raise RequireLiteralValue(f"a tile product's {name} must be a constant")
        if not (isinstance(a, types.Array) and a.ndim == 2 and a.layout == "C" and a.dtype == types.uint8):
            raise TypingError("a tile product takes C-contiguous uint8 rows (32, depth)")
        what, used_rows, used_strips = kind.literal_value, row_tiles.literal_value, strips.literal_value

        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            a_array, a_data = _bytes(context, builder, signature.args[1], args[1])
            b_data = builder.gep(_bytes(context, builder, signature.args[2], args[2])[1], [args[3]])
            row_bytes = cgutils.unpack_tuple(builder, a_array.strides, 2)[0]
            depth = cgutils.unpack_tuple(builder, a_array.shape, 2)[1]
            tile_bytes = ir.Constant(I64, TILE_BYTES)
            strip_starts = [builder.gep(b_data, [builder.mul(args[4], ir.Constant(I64, s))])
                            for s in range(used_strips)]
            for r in range(used_rows):
                for s in range(used_strips):
                    _call(builder, "llvm.x86.tilezero", _register(SUMS[2 * r + s]))
            with cgutils.for_range(builder, builder.udiv(depth, tile_bytes)) as loop:
                a_offset = builder.mul(loop.index, tile_bytes)
                b_offset = builder.mul(loop.index, ir.Constant(I64, TILE_ROWS * TILE_BYTES))
                for r in range(used_rows):   # each tile loaded just before its first product: 10-25% faster
                    start = builder.add(a_offset, builder.mul(row_bytes, ir.Constant(I64, TILE_ROWS * r)))
                    _call(builder, "llvm.x86.tileloadd64", _register(A_TILES[r]), builder.gep(a_data, [start]),
                          row_bytes)                                              # than all loads first
                    for s in range(used_strips):
                        if r == 0:
                            _call(builder, "llvm.x86.tileloadd64", _register(B_TILES[s]),
                                  builder.gep(strip_starts[s], [b_offset]), tile_bytes)
                            ahead = builder.add(b_offset, ir.Constant(I64, AHEAD * TILE_ROWS * TILE_BYTES))
                            for line in range(0, TILE_ROWS * TILE_BYTES, 64):
                                _call(builder, "llvm.prefetch.p0",
                                      builder.gep(strip_starts[s], [builder.add(ahead, ir.Constant(I64, line))]),
                                      ir.Constant(ir.IntType(32), 0), ir.Constant(ir.IntType(32), 3),
                                      ir.Constant(ir.IntType(32), 1))
                        _call(builder, MULTIPLY[what], _register(SUMS[2 * r + s]), _register(A_TILES[r]),
                              _register(B_TILES[s]))
            _store_sums(what, used_rows, used_strips, context, builder, signature, args)
            return context.get_dummy_value()
        return types.void(kind, a, b, types.intp, types.intp, correction, scale, types.intp, y, types.intp,
                          types.intp, types.intp, row_tiles, strips), codegen

    def _store_sums(what: int, used_rows: int, used_strips: int, context: Any, builder: Any, signature: Any,
                    args: Any) -> None:
        """The tiles of sums through a buffer on the stack into the ``valid`` rows of ``y``, 16
        lanes at a time, int8's scaled as the register tiles scale theirs."""
        correction, scale, column, y, y_start, y_stride, valid = args[5:12]
        corrections, scales, out = (context.make_array(signature.args[i])(context, builder, value).data
                                    for i, value in ((5, correction), (6, scale), (8, y)))
        lanes = TILE_BYTES // 4
        sums_row = used_strips * TILE_BYTES
        floats, ints = ir.VectorType(F32, lanes), ir.VectorType(I32, lanes)
        buffer = cgutils.alloca_once(builder, ir.ArrayType(ints, ROWS * used_strips))   # aligned as a vector
        buffer = builder.bitcast(buffer, I8.as_pointer())
        for r in range(used_rows):
            for s in range(used_strips):
                _call(builder, "llvm.x86.tilestored64", _register(SUMS[2 * r + s]),
                      builder.gep(buffer, [ir.Constant(I64, r * TILE_ROWS * sums_row + s * TILE_BYTES)]),
                      ir.Constant(I64, sums_row))
        stripped = []
        for s in range(used_strips):
            lane0 = builder.add(column, ir.Constant(I64, s * lanes))
            stripped.append([builder.load(builder.bitcast(builder.gep(array, [lane0]), vector.as_pointer()), align=1)
                             for array, vector in ((corrections, ints), (scales, floats))] if what == INT8 else None)
        with cgutils.for_range(builder, valid) as loop:
            row_start = builder.gep(out, [builder.add(y_start, builder.mul(y_stride, loop.index))])
            row_sums = builder.gep(buffer, [builder.mul(loop.index, ir.Constant(I64, sums_row))])
            for s in range(used_strips):
                at = builder.bitcast(builder.gep(row_sums, [ir.Constant(I64, s * TILE_BYTES)]), ints.as_pointer())
                total = builder.load(at, align=TILE_BYTES)
                if what == INT8:
                    total_correction, total_scale = stripped[s]
                    total = builder.fmul(builder.sitofp(builder.sub(total, total_correction), floats), total_scale)
                else:
                    total = builder.bitcast(total, floats)
                target = builder.gep(row_start, [ir.Constant(I64, s * lanes)])
                builder.store(total, builder.bitcast(target, floats.as_pointer()), align=4)

    def hold_rows(a: Any, row: int, count: int, held: np.ndarray) -> None:
        """Rows ``row`` to ``row + count - 1`` of a product's A, a C-contiguous matrix or an
        :class:`~kuiperinfer.kernels.matrix.products.IndirectRows` tuple, copied as bytes into
        the first ``count`` rows of ``held`` (uint8 (32, depth)), whose bytes past a row's
        stay as they are (zeros: the padding of the depth to whole tiles)."""

    @overload(hold_rows, inline="always")
    def _hold_rows(a, row, count, held):  # noqa: ANN001, ANN202
        if isinstance(a, types.BaseTuple):
            def indirect(a, row, count, held):  # noqa: ANN001, ANN202
                offsets, source, fill, tap_bytes = a
                depth = held.shape[1]
                for r in range(count):
                    for tap in range(offsets.shape[1]):
                        at, to = offsets[row + r, tap], r * depth + tap * tap_bytes
                        if at >= 0:
                            copy_bytes(held, to, source, at, tap_bytes)
                        else:
                            copy_bytes(held, to, fill, 0, tap_bytes)
            return indirect

        def matrix(a, row, count, held):  # noqa: ANN001, ANN202
            width = a.shape[1] * a.itemsize
            for r in range(count):
                copy_bytes(held, r * held.shape[1], a, (row + r) * width, width)
        return matrix
