"""Register tiles of the matrix engine's products: the x86 dot-product instructions NumPy
cannot reach, from Numba through LLVM IR that llvmlite builds.

A tile multiplies ``rows`` rows of A by ``strips`` strips of the packed B (``lanes`` output
columns each) over the whole depth, its ``rows x strips`` accumulators held in registers,
and stores them, as float32, into the rows of a buffer.
An A row is read in groups of 4 bytes (4 uint8 activations, or 2 bfloat16 values); for each
group the tile loads every strip's packed group of B once, and for each row broadcasts the
row's group to all lanes and multiplies-adds it into the row's accumulators, by one
:class:`Dot` per row and strip:

* :data:`VNNI`: AVX512-VNNI's ``vpdpbusd``, 16 int32 lanes, each adding 4 products of
  uint8 and int8, exactly.
* :data:`AVX2`: ``vpmaddwd`` on 16-bit values, 8 int32 lanes: the A group zero-extended
  into two pairs, B's int8 pairs sign-extended as they are loaded, two ``vpmaddwd`` per
  group, exact. (``vpmaddubsw`` multiplies the bytes without widening but saturates its
  16-bit pair sums once activations use all 8 bits; docs/performance.md has the measurement
  that chose widening.)
* :data:`BF16`: AVX512-BF16's ``vdpbf16ps``, 16 float32 lanes, each adding 2 products of
  bfloat16 values (exact in float32; denormal inputs and outputs count as zero).

:func:`tile` calls the tile of a dot, rows and strips given as constants in the compiled
code. Its A is a matrix, or the rows of an indirect convolution: per row, the byte offsets
of its window's pixels in the input, each pixel's channels read where they lie
(:class:`~kuiperinfer.kernels.matrix.products.IndirectRows`). A tile reads rows past the
matrix's last as its last row again (the caller keeps only the valid rows), and the bytes of
a row past its last whole group one at a time, so it never reads outside the array. Only a
CPU with the dot's instructions may run its tiles (:mod:`kuiperinfer.kernels.matrix.products`
chooses); LLVM compiles them on first use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kuiperinfer.kernels.jit import AVAILABLE

if AVAILABLE:
    import llvmlite.binding

GROUP_BYTES = 4
"""Bytes of an A row a tile takes per step, broadcast to every lane."""


def target_features() -> frozenset[str]:
    """The instruction sets (LLVM's names: ``avx2``, ``avx512vnni``, ``avx512bf16``) that
    Numba's code may use in this process: the CPU's, unless ``NUMBA_CPU_FEATURES`` names
    others (then only those it adds with ``+``); none without Numba."""
    if not AVAILABLE:
        return frozenset()
    from numba.core import config

    if config.CPU_FEATURES is not None:
        return frozenset(name[1:] for name in config.CPU_FEATURES.split(",") if name.startswith("+"))
    return frozenset(name for name, present in llvmlite.binding.get_host_cpu_features().items() if present)

if AVAILABLE:
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.core.errors import RequireLiteralValue, TypingError
    from numba.extending import intrinsic

    I8, I16, I32 = ir.IntType(8), ir.IntType(16), ir.IntType(32)
    F32 = ir.FloatType()

    class BFloatType(ir.Type):
        """LLVM's ``bfloat``, which llvmlite's IR builder does not name."""

        def _to_string(self) -> str:
            return "bfloat"

    BF16_VECTOR = (ir.VectorType(BFloatType(), 32) if llvmlite.binding.llvm_version_info >= (17,)
                   else ir.VectorType(I16, 32))
    """vdpbf16ps's operands: bfloat vectors since LLVM 17, 16-bit integers before."""

    def call_intrinsic(builder: Any, name: str, result: Any, *args: Any) -> Any:
        """A call of the LLVM intrinsic ``name`` (declared in the module the first time)."""
        function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(result, [a.type for a in args]),
                                                  name)
        return builder.call(function, args)

    def _load(builder: Any, pointer: Any, vector: Any) -> Any:
        return builder.load(builder.bitcast(pointer, vector.as_pointer()), align=1)

    def _broadcast(builder: Any, word: Any, lanes: int) -> Any:
        """The int32 ``word`` in every one of ``lanes`` lanes."""
        vector = ir.VectorType(I32, lanes)
        one = builder.insert_element(ir.Constant(vector, None), word, ir.Constant(I32, 0))
        return builder.shuffle_vector(one, ir.Constant(vector, None), ir.Constant(vector, [0] * lanes))

    @dataclass(frozen=True)
    class Dot:
        """One multiply-add instruction of a tile: what a strip's packed group of B is and how a
        broadcast A group multiplies it into ``lanes`` accumulators of ``accumulator``."""

        name: str
        lanes: int
        accumulator: Any
        """The LLVM type of an accumulator's lane."""
        strip_bytes: int
        """Bytes of a strip's packed B per group of A."""

        @property
        def vector(self) -> Any:
            return ir.VectorType(self.accumulator, self.lanes)

        def load_b(self, builder: Any, pointer: Any) -> Any:
            raise NotImplementedError

        def broadcast_a(self, builder: Any, word: Any) -> Any:
            raise NotImplementedError

        def multiply_add(self, builder: Any, acc: Any, a: Any, b: Any) -> Any:
            raise NotImplementedError

    class VnniDot(Dot):
        """``vpdpbusd``: each int32 lane adds the 4 products of A's group (uint8) and its
        column's 4 int8 weights, packed as the lane's 4 bytes."""

        def load_b(self, builder: Any, pointer: Any) -> Any:
            return _load(builder, pointer, ir.VectorType(I8, 64))

        def broadcast_a(self, builder: Any, word: Any) -> Any:
            return builder.bitcast(_broadcast(builder, word, 16), ir.VectorType(I8, 64))

        def multiply_add(self, builder: Any, acc: Any, a: Any, b: Any) -> Any:
            return call_intrinsic(builder, "llvm.x86.avx512.vpdpbusd.512", self.vector, acc, a, b)

    class Avx2Dot(Dot):
        """``vpmaddwd``: A's group as the pairs (a0, a1) and (a2, a3) of 16-bit values, each
        multiplying 8 columns' pairs of weights, sign-extended from the packed int8 as they are
        loaded (16 bytes per pair: the 8 columns' (w0, w1), then 16 of their (w2, w3))."""

        def load_b(self, builder: Any, pointer: Any) -> Any:
            halves = [_load(builder, builder.gep(pointer, [ir.Constant(I32, 16 * i)]), ir.VectorType(I8, 16))
                      for i in range(2)]
            return [builder.sext(half, ir.VectorType(I16, 16)) for half in halves]

        def broadcast_a(self, builder: Any, word: Any) -> Any:
            group = builder.zext(builder.bitcast(word, ir.VectorType(I8, 4)), ir.VectorType(I16, 4))
            return [builder.shuffle_vector(group, ir.Constant(ir.VectorType(I16, 4), None),
                                           ir.Constant(ir.VectorType(I32, 16), [first, first + 1] * 8))
                    for first in (0, 2)]

        def multiply_add(self, builder: Any, acc: Any, a: Any, b: Any) -> Any:
            pairs = [call_intrinsic(builder, "llvm.x86.avx2.pmadd.wd", self.vector, a[i], b[i]) for i in range(2)]
            return builder.add(acc, builder.add(pairs[0], pairs[1]))

    class Bf16Dot(Dot):
        """``vdpbf16ps``: each float32 lane adds the 2 products of A's group (2 bfloat16) and
        its column's 2 bfloat16 weights, packed as the lane's 4 bytes."""

        def load_b(self, builder: Any, pointer: Any) -> Any:
            return builder.bitcast(_load(builder, pointer, ir.VectorType(I16, 32)), BF16_VECTOR)

        def broadcast_a(self, builder: Any, word: Any) -> Any:
            return builder.bitcast(_broadcast(builder, word, 16), BF16_VECTOR)

        def multiply_add(self, builder: Any, acc: Any, a: Any, b: Any) -> Any:
            return call_intrinsic(builder, "llvm.x86.avx512bf16.dpbf16ps.512", self.vector, acc, a, b)

    VNNI = VnniDot("vnni", 16, I32, 64)
    AVX2 = Avx2Dot("avx2", 8, I32, 32)
    BF16 = Bf16Dot("bf16", 16, F32, 64)
    DOTS = (VNNI, AVX2, BF16)
    """By their codes, the index here (what :func:`tile` takes)."""

    def _row_word(builder: Any, row: Any, offset: Any, tail: Any) -> Any:
        """The ``tail`` (< 4) bytes at ``row + offset`` as an int32, byte by byte, zeros above."""
        word = cgutils.alloca_once_value(builder, ir.Constant(I32, 0))
        for i in range(GROUP_BYTES - 1):
            with builder.if_then(builder.icmp_unsigned(">", tail, ir.Constant(tail.type, i))):
                byte = builder.load(builder.gep(row, [builder.add(offset, ir.Constant(offset.type, i))]))
                shifted = builder.shl(builder.zext(byte, I32), ir.Constant(I32, 8 * i))
                builder.store(builder.or_(builder.load(word), shifted), word)
        return builder.load(word)

    def _emit_tile(dot: Dot, rows: int, strips: int, context: Any, builder: Any, signature: Any, args: Any) -> None:
        _, a, row, valid = args[:4]
        a_array = context.make_array(signature.args[1])(context, builder, a)
        lda = cgutils.unpack_tuple(builder, a_array.strides, 2)[0]
        row_bytes = builder.mul(cgutils.unpack_tuple(builder, a_array.shape, 2)[1],
                                ir.Constant(lda.type, signature.args[1].dtype.bitwidth // 8))
        groups = builder.udiv(row_bytes, ir.Constant(lda.type, GROUP_BYTES))
        tail = builder.urem(row_bytes, ir.Constant(lda.type, GROUP_BYTES))
        row_pointers = _row_starts(builder, a_array.data, lda, row, valid, rows)
        strip_pointers, accumulators = _strips_and_accumulators(dot, rows, strips, context, builder, signature, args)
        with cgutils.for_range(builder, groups) as loop:
            offset = builder.mul(loop.index, ir.Constant(loop.index.type, GROUP_BYTES))
            _step(dot, builder, strip_pointers, accumulators, loop.index,
                  [_word(builder, pointer, offset) for pointer in row_pointers])
        with builder.if_then(builder.icmp_unsigned("!=", tail, ir.Constant(tail.type, 0))):
            offset = builder.mul(groups, ir.Constant(groups.type, GROUP_BYTES))
            _step(dot, builder, strip_pointers, accumulators, groups,
                  [_row_word(builder, pointer, offset, tail) for pointer in row_pointers])

        _store_sums(dot, rows, strips, accumulators, context, builder, signature, args)

    def _emit_indirect_tile(dot: Dot, rows: int, strips: int, context: Any, builder: Any, signature: Any,
                            args: Any) -> None:
        """:func:`_emit_tile` of the rows that an :class:`~kuiperinfer.kernels.matrix.products.IndirectRows`
        (``offsets``, ``source``, ``fill``, ``tap_bytes``) describes: row ``m`` is, tap after tap,
        ``tap_bytes`` (a multiple of 4) from ``source``'s byte ``offsets[m, tap]``, or from ``fill``
        where that offset is negative."""
        _, rows_value, row, valid = args[:4]
        offsets_type, source_type, fill_type, _ = signature.args[1].types
        offsets_value, source_value, fill_value, tap_bytes = cgutils.unpack_tuple(builder, rows_value, 4)
        table = context.make_array(offsets_type)(context, builder, offsets_value)
        source = builder.bitcast(context.make_array(source_type)(context, builder, source_value).data, I8.as_pointer())
        fill = builder.bitcast(context.make_array(fill_type)(context, builder, fill_value).data, I8.as_pointer())
        taps = cgutils.unpack_tuple(builder, table.shape, 2)[1]
        row_stride = cgutils.unpack_tuple(builder, table.strides, 2)[0]
        entries = [builder.bitcast(start, ir.IntType(offsets_type.dtype.bitwidth).as_pointer())
                   for start in _row_starts(builder, table.data, row_stride, row, valid, rows)]
        strip_pointers, accumulators = _strips_and_accumulators(dot, rows, strips, context, builder, signature, args)
        per_tap = builder.udiv(tap_bytes, ir.Constant(tap_bytes.type, GROUP_BYTES))
        with cgutils.for_range(builder, taps) as tap_loop:
            bases = []
            for entry in entries:
                offset = builder.load(builder.gep(entry, [tap_loop.index]))
                inside = builder.icmp_signed(">=", offset, ir.Constant(offset.type, 0))
                bases.append(builder.select(inside, builder.gep(source, [offset]), fill))
            first = builder.mul(tap_loop.index, per_tap)
            with cgutils.for_range(builder, per_tap) as loop:
                offset = builder.mul(loop.index, ir.Constant(loop.index.type, GROUP_BYTES))
                _step(dot, builder, strip_pointers, accumulators, builder.add(first, loop.index),
                      [_word(builder, base, offset) for base in bases])

        _store_sums(dot, rows, strips, accumulators, context, builder, signature, args)

    def _row_starts(builder: Any, data: Any, stride: Any, row: Any, valid: Any, rows: int) -> list[Any]:
        """Byte pointers to rows ``row`` to ``row + rows - 1`` of a 2-D array's ``data`` (rows
        ``stride`` bytes apart), those past ``row + valid - 1`` to that one."""
        data = builder.bitcast(data, I8.as_pointer())
        last = builder.sub(builder.add(row, valid), ir.Constant(row.type, 1))
        starts = []
        for r in range(rows):
            index = builder.add(row, ir.Constant(row.type, r))
            index = builder.select(builder.icmp_signed("<", index, last), index, last)
            starts.append(builder.gep(data, [builder.mul(index, stride)]))
        return starts

    def _word(builder: Any, pointer: Any, offset: Any) -> Any:
        """The 4 bytes at ``pointer + offset`` as an int32."""
        return builder.load(builder.bitcast(builder.gep(pointer, [offset]), I32.as_pointer()), align=1)

    def _strips_and_accumulators(dot: Dot, rows: int, strips: int, context: Any, builder: Any, signature: Any,
                                 args: Any) -> tuple[list[Any], list[list[Any]]]:
        """Where each strip of the packed B starts, and the tile's zeroed accumulators."""
        b, b_start, strip_bytes = args[4:7]
        b_data = builder.gep(builder.bitcast(context.make_array(signature.args[4])(context, builder, b).data,
                                             I8.as_pointer()), [b_start])
        strip_pointers = [builder.gep(b_data, [builder.mul(strip_bytes, ir.Constant(strip_bytes.type, s))])
                          for s in range(strips)]
        accumulators = [[cgutils.alloca_once_value(builder, ir.Constant(dot.vector, None)) for _ in range(strips)]
                        for _ in range(rows)]
        return strip_pointers, accumulators

    def _step(dot: Dot, builder: Any, strip_pointers: list[Any], accumulators: list[list[Any]], group: Any,
              words: list[Any]) -> None:
        """Every accumulator plus its row's A ``words`` (one per row) times its strip's ``group`` of B."""
        offset = builder.mul(group, ir.Constant(group.type, dot.strip_bytes))
        b_values = [dot.load_b(builder, builder.gep(pointer, [offset])) for pointer in strip_pointers]
        for r, word in enumerate(words):
            a_value = dot.broadcast_a(builder, word)
            for s, b_value in enumerate(b_values):
                total = dot.multiply_add(builder, builder.load(accumulators[r][s]), a_value, b_value)
                builder.store(total, accumulators[r][s])

    def _store_sums(dot: Dot, rows: int, strips: int, accumulators: list[list[Any]], context: Any, builder: Any,
                    signature: Any, args: Any) -> None:
        """Store the accumulators into ``y`` as float32, row ``r``'s from ``y_start + r * y_stride``
        on; integer ones as ``(acc - correction) * scale`` of their columns from ``column`` on."""
        correction, scale, column, y, y_start, y_stride = args[7:13]
        corrections, scales, out = (context.make_array(signature.args[i])(context, builder, value).data
                                    for i, value in ((7, correction), (8, scale), (10, y)))
        floats = ir.VectorType(F32, dot.lanes)
        row_starts = [builder.gep(out, [builder.add(y_start, builder.mul(y_stride, ir.Constant(y_stride.type, r)))])
                      for r in range(rows)]
        for s in range(strips):
            lane0 = builder.add(column, ir.Constant(column.type, s * dot.lanes))
            if dot.accumulator is I32:
                columns_correction = _load(builder, builder.gep(corrections, [lane0]), dot.vector)
                columns_scale = _load(builder, builder.gep(scales, [lane0]), floats)
            for r in range(rows):
                total = builder.load(accumulators[r][s])
                if dot.accumulator is I32:
                    total = builder.fmul(builder.sitofp(builder.sub(total, columns_correction), floats), columns_scale)
                target = builder.gep(row_starts[r], [ir.Constant(I32, s * dot.lanes)])
                builder.store(total, builder.bitcast(target, floats.as_pointer()), align=1)

    def _constants(**values: Any) -> None:
        for name, value in values.items():
            if not isinstance(value, types.IntegerLiteral):
                raise RequireLiteralValue(f"a tile's {name} must be a constant")

    def make_tile(dots: tuple[Dot, ...]) -> Any:
        """The tile intrinsic over ``dots``, which it takes by their index (:data:`tile` is
        the one over :data:`DOTS`; the benchmarks make others)."""

        @intrinsic(prefer_literal=True)
        def tile(typingctx, dot, a, row, valid, b, b_start, strip_bytes, correction, scale, column, y,  # noqa: ANN001, ANN202
                 y_start, y_stride, rows, strips):
            """The float32 ``y`` from ``y_start + r * y_stride + s * lanes`` on (``lanes`` values) =
            rows ``row + r`` of the 2-D ``a``, or of the indirect rows ``a`` describes (a tuple:
            :func:`_emit_indirect_tile`; rows past ``row + valid - 1`` read as that one) times
            strips ``s`` of the packed ``b``, the first at byte ``b_start``, the next
            ``strip_bytes`` further on; integer sums as ``(acc - correction) * scale`` of their
            columns from ``column`` on (int32 and float32 arrays, past the last strip). ``dot``,
            ``rows`` and ``strips`` are constants."""
            _constants(dot=dot, rows=rows, strips=strips)
            indirect = isinstance(a, types.BaseTuple)
            if indirect:
                offsets, source, fill, _ = a.types
                if not (isinstance(offsets, types.Array) and offsets.ndim == 2 and offsets.layout == "C"
                        and offsets.dtype in (types.int32, types.int64) and source.layout == "C"
                        and fill.layout == "C"):
                    raise TypingError("a tile's indirect rows are C-contiguous int32 or int64 offsets (M, taps) "
                                      "into a C-contiguous source, and a C-contiguous fill")
            elif not (isinstance(a, types.Array) and a.ndim == 2 and a.layout == "C"):
                raise TypingError("a tile's A is a C-contiguous 2-D array")
            chosen, tile_rows, tile_strips = dots[dot.literal_value], rows.literal_value, strips.literal_value
            emit = _emit_indirect_tile if indirect else _emit_tile

            def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
                emit(chosen, tile_rows, tile_strips, context, builder, signature, args)
                return context.get_dummy_value()
            return types.void(dot, a, types.intp, types.intp, b, types.intp, types.intp, correction, scale, types.intp,
                              y, types.intp, types.intp, rows, strips), codegen
        return tile

    tile = make_tile(DOTS)
