"""Register tiles of the float32 products: FMA on 512-bit vectors (AVX-512) or on 256-bit
ones (AVX2 and FMA), from Numba through LLVM IR that llvmlite builds.

A tile multiplies ``rows`` rows of A by ``strips`` strips of the packed B (``lanes``
columns each) over a block of the depth, its ``rows x strips`` accumulators held in
registers: at each step of the depth it loads each strip's ``lanes`` weights once and, for
each row, multiplies the row's value, broadcast to every lane, into the row's accumulators
(``vbroadcastss``, ``vfmadd231ps``).

The sums go straight into the output, no scratch copy between: the first block of the
depth stores its sums, a later one adds its own to them (so that float32's rounding grows
as over a block, not over the whole depth). After the last block, in registers: the bias,
a clamp (no activation, ReLU, ReLU6, any clip), the residual and a second clamp; any other
activation is the caller's, on the stored rows. The last strip of a tile is read and stored
under a mask of its valid columns, so a tile touches no memory past the output, the
residual or A (B and the bias are padded to whole strips when packed). A tile first asks
for its output's lines (``prefetchw``), so that fetching them overlaps its multiply-adds:
an output larger than the caches was written 30% faster so.

:func:`tile` takes the tile's largest shape as a constant and compiles, behind one
``switch``, a loop for each smaller one the caller may ask for: every strip count up to
the largest (the last strip whole or, on 512-bit vectors, half: :data:`MIN_LANES`) and
:func:`row_counts` rows. Only a CPU with the vector width's instructions may run it
(:mod:`kuiperinfer.kernels.matrix.products` chooses).
"""

from __future__ import annotations

from typing import Any

from kuiperinfer.kernels.jit import AVAILABLE

FIRST, LAST, RESIDUAL = 1, 2, 4
"""A tile's stage, as bits: the first block of the depth (sums start at zero), the last (the
epilogue follows), and with a residual to add after the first clamp."""
SHAPES = ((12, 2, 16), (6, 2, 8))
"""Rows, strips and lanes of the two tiles, by their index (what :func:`tile` takes): on
512-bit vectors 12 rows by 2 strips, 24 accumulators of the 32 registers; on 256-bit ones
6 by 2, 12 of the 16 (the shapes of onnxruntime's MLAS)."""


MIN_LANES = 8
"""The narrowest strip a tile computes: a 512-bit tile's last strip takes 256-bit vectors
where it holds 8 columns or fewer (24, 40 or 72 channels waste no multiply-adds on zeros)."""
CHAINS = 8
"""Independent sums a tile keeps going at least, so that FMAs follow each other at full rate
(2 per cycle, 4 cycles each): a tile of fewer accumulators takes 2 or 4 sets of them, each
adding every second or fourth step of the depth, and adds the sets up at the end."""


AHEAD = 32
"""Steps of the depth ahead of the tile that it asks for B's lines (prefetch)."""


def row_counts(rows: int) -> tuple[int, ...]:
    """The rows a tile of at most ``rows`` rows computes at a time, largest first: ``rows``
    and the powers of two below (the last rows of a product, fewer than ``rows``, take at
    most 3 tiles)."""
    return (rows, *(1 << i for i in reversed(range(rows.bit_length())) if 1 << i < rows))


def unrolled(rows: int, strips: int) -> int:
    """The sets of accumulators a ``rows x strips`` tile takes (:data:`CHAINS`)."""
    return min(4, -(-CHAINS // (rows * strips)))


if AVAILABLE:
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.core.errors import RequireLiteralValue, TypingError
    from numba.extending import intrinsic

    from kuiperinfer.kernels.compiled.tiles import call_intrinsic

    I8, I32, I64, F32 = ir.IntType(8), ir.IntType(32), ir.IntType(64), ir.FloatType()

    class _Vectors:
        """The IR of one vector width: loads, stores (whole or under a mask), FMA, splats."""

        def __init__(self, builder: Any, lanes: int):
            self.builder, self.lanes = builder, lanes
            self.type = ir.VectorType(F32, lanes)
            self.suffix = f"v{lanes}f32"

        def pointer(self, base: Any, index: Any) -> Any:
            return self.builder.bitcast(self.builder.gep(base, [index]), self.type.as_pointer())

        def load(self, base: Any, index: Any, mask: Any = None) -> Any:
            pointer = self.pointer(base, index)
            if mask is None:
                return self.builder.load(pointer, align=4)
            return call_intrinsic(self.builder, f"llvm.masked.load.{self.suffix}.p0", self.type, pointer,
                                  ir.Constant(I32, 4), mask, ir.Constant(self.type, None))

        def store(self, value: Any, base: Any, index: Any, mask: Any = None) -> None:
            pointer = self.pointer(base, index)
            if mask is None:
                self.builder.store(value, pointer, align=4)
            else:
                call_intrinsic(self.builder, f"llvm.masked.store.{self.suffix}.p0", ir.VoidType(), value, pointer,
                               ir.Constant(I32, 4), mask)

        def splat(self, scalar: Any) -> Any:
            """``scalar`` in every lane of a vector of its type."""
            vector = ir.VectorType(scalar.type, self.lanes)
            one = self.builder.insert_element(ir.Constant(vector, None), scalar, ir.Constant(I32, 0))
            return self.builder.shuffle_vector(one, ir.Constant(vector, None),
                                               ir.Constant(ir.VectorType(I32, self.lanes), [0] * self.lanes))

        def fma(self, a: Any, b: Any, c: Any) -> Any:
            return call_intrinsic(self.builder, f"llvm.fma.{self.suffix}", self.type, a, b, c)

        def clamp(self, value: Any, low: Any, high: Any) -> Any:
            """``low if v < low else (high if v > high else v)``, lane by lane (the bounds float32
            scalars): NaN stays NaN."""
            low, high = self.splat(low), self.splat(high)
            value = self.builder.select(self.builder.fcmp_ordered("<", value, low), low, value)
            return self.builder.select(self.builder.fcmp_ordered(">", value, high), high, value)

        def mask(self, valid: Any) -> Any:
            """Lanes below ``valid`` (an i64) set."""
            lanes = ir.Constant(ir.VectorType(I64, self.lanes), list(range(self.lanes)))
            return self.builder.icmp_signed("<", lanes, self.splat(valid))

    def _added(builder: Any, sets: list[list[list[Any]]]) -> list[list[Any]]:
        """The first set of accumulators, the others added into it in order."""
        for r, line in enumerate(sets[0]):
            for s, acc in enumerate(line):
                total = builder.load(acc)
                for other in sets[1:]:
                    total = builder.fadd(total, builder.load(other[r][s]))
                builder.store(total, acc)
        return sets[0]

    def _data(context: Any, builder: Any, array_type: Any, array: Any) -> tuple[Any, Any]:
        """A float32 array's data pointer and its row length in elements (None for a 1-D one)."""
        made = context.make_array(array_type)(context, builder, array)
        if array_type.ndim == 1:
            return made.data, None
        stride = cgutils.unpack_tuple(builder, made.strides, 2)[0]
        return made.data, builder.udiv(stride, ir.Constant(stride.type, 4))

    def _emit_shape(lanes: int, widths: list[_Vectors], rows: int, operands: dict[str, Any]) -> None:
        """The loop of a tile of ``rows`` rows and a strip of ``lanes`` columns for each of
        ``widths`` (the last may compute only half of them) over its block of the depth, then
        its stores."""
        builder, strips = widths[0].builder, len(widths)
        row, k0, depth, stage = operands["row"], operands["k0"], operands["depth"], operands["stage"]

        def constant(value: int) -> Any:
            return ir.Constant(row.type, value)

        def is_set(flag: int) -> Any:
            return builder.icmp_unsigned("!=", builder.and_(stage, constant(flag)), constant(0))

        a_data, lda = operands["a"]
        out_data, ldo = operands["out"]
        row_starts = [builder.add(builder.mul(builder.add(row, constant(r)), lda), k0) for r in range(rows)]
        strip_length = builder.mul(operands["depth_total"], constant(lanes))
        strip_starts = [builder.add(builder.mul(builder.add(operands["strip"], constant(s)), strip_length),
                                    builder.mul(k0, constant(lanes))) for s in range(strips)]
        columns = [builder.add(operands["column0"], constant(s * lanes)) for s in range(strips)]
        out_starts = [[builder.add(builder.mul(builder.add(row, constant(r)), ldo), columns[s]) for s in range(strips)]
                      for r in range(rows)]
        tail = builder.sub(operands["columns"], constant((strips - 1) * lanes))
        whole = builder.icmp_signed("==", tail, constant(widths[-1].lanes))
        tail_mask = widths[-1].mask(tail)

        def strip_mask(s: int) -> Any:
            return None if s < strips - 1 else tail_mask

        write, keep, data = (ir.Constant(I32, value) for value in (1, 3, 1))
        for line in out_starts:   # the output's lines asked for, for writing, while the tile multiplies
            for start in line:
                pointer = builder.bitcast(builder.gep(out_data, [start]), I8.as_pointer())
                call_intrinsic(builder, "llvm.prefetch.p0", ir.VoidType(), pointer, write, keep, data)
        sets = unrolled(rows, strips)
        accumulators = [[[cgutils.alloca_once(builder, width.type) for width in widths] for _ in range(rows)]
                        for _ in range(sets)]
        for group in accumulators:
            for line in group:
                for width, acc in zip(widths, line):
                    builder.store(ir.Constant(width.type, None), acc)

        def step(index: Any, group: list[list[Any]]) -> None:
            """One step of the depth into one set of accumulators."""
            b_values = [width.load(operands["packed"], builder.add(start, builder.mul(index, constant(lanes))))
                        for width, start in zip(widths, strip_starts)]
            for start in strip_starts:
                ahead = builder.add(start, builder.mul(builder.add(index, constant(AHEAD)), constant(lanes)))
                pointer = builder.bitcast(builder.gep(operands["packed"], [ahead]), I8.as_pointer())
                call_intrinsic(builder, "llvm.prefetch.p0", ir.VoidType(), pointer, ir.Constant(I32, 0),
                               ir.Constant(I32, 3), ir.Constant(I32, 1))
            for r in range(rows):
                a_value = builder.load(builder.gep(a_data, [builder.add(row_starts[r], index)]))
                for s, width in enumerate(widths):
                    builder.store(width.fma(width.splat(a_value), b_values[s], builder.load(group[r][s])), group[r][s])

        whole_steps = builder.mul(builder.udiv(depth, constant(sets)), constant(sets))
        with cgutils.for_range_slice(builder, constant(0), whole_steps, constant(sets)) as (index, _):
            for u in range(sets):
                step(builder.add(index, constant(u)), accumulators[u])
        with cgutils.for_range_slice(builder, whole_steps, depth, constant(1)) as (index, _):
            step(index, accumulators[0])
        accumulators = accumulators[0] if sets == 1 else _added(builder, accumulators)

        def update(change: Any) -> None:
            """Each accumulator replaced by ``change(r, s, width, value)``."""
            for r in range(rows):
                for s, width in enumerate(widths):
                    builder.store(change(r, s, width, builder.load(accumulators[r][s])), accumulators[r][s])

        with builder.if_then(builder.not_(is_set(FIRST))):
            update(lambda r, s, width, value: builder.fadd(width.load(out_data, out_starts[r][s], strip_mask(s)),
                                                           value))
        with builder.if_then(is_set(LAST)):
            low, high, residual_low, residual_high = (builder.load(builder.gep(operands["clamps"], [constant(i)]))
                                                      for i in range(4))
            biases = [width.load(operands["bias"], column) for width, column in zip(widths, columns)]
            update(lambda r, s, width, value: width.clamp(builder.fadd(value, biases[s]), low, high))
            with builder.if_then(is_set(RESIDUAL)):
                residual_data, ldr = operands["residual"]
                starts = [builder.mul(builder.add(row, constant(r)), ldr) for r in range(rows)]
                update(lambda r, s, width, value: width.clamp(
                    builder.fadd(value, width.load(residual_data, builder.add(starts[r], columns[s]), strip_mask(s))),
                    residual_low, residual_high))

        with builder.if_else(whole) as (unmasked, masked):
            for block, masks in ((unmasked, lambda s: None), (masked, strip_mask)):
                with block:
                    for r in range(rows):
                        for s, width in enumerate(widths):
                            width.store(builder.load(accumulators[r][s]), out_data, out_starts[r][s], masks(s))

    def _emit_tile(lanes: int, tile_rows: int, tile_strips: int, context: Any, builder: Any, signature: Any,
                   args: Any) -> None:
        _, a, row, rows, k0, depth, packed, strip, strips, out, column0, columns, bias, clamps, residual, stage = args
        kinds = signature.args
        a_array = context.make_array(kinds[1])(context, builder, a)
        operands = {
            "a": _data(context, builder, kinds[1], a), "out": _data(context, builder, kinds[9], out),
            "residual": _data(context, builder, kinds[14], residual),
            "packed": _data(context, builder, kinds[6], packed)[0], "bias": _data(context, builder, kinds[12], bias)[0],
            "clamps": _data(context, builder, kinds[13], clamps)[0],
            "depth_total": cgutils.unpack_tuple(builder, a_array.shape, 2)[1],
            "row": row, "k0": k0, "depth": depth, "strip": strip, "column0": column0, "columns": columns,
            "stage": stage,
        }
        whole, half = _Vectors(builder, lanes), _Vectors(builder, lanes // 2)
        lasts = (whole, half) if half.lanes >= MIN_LANES else (whole,)
        last_columns = builder.sub(columns, builder.mul(builder.sub(strips, ir.Constant(strips.type, 1)),
                                                        ir.Constant(strips.type, lanes)))
        is_half = builder.zext(builder.icmp_signed("<=", last_columns, ir.Constant(strips.type, half.lanes)),
                               strips.type) if half in lasts else ir.Constant(strips.type, 0)
        # a case per rows, strips (fewer than 8) and whether the last strip is half as wide
        key = builder.add(builder.mul(builder.add(builder.mul(rows, ir.Constant(rows.type, 8)), strips),
                                      ir.Constant(rows.type, 2)), is_half)
        done = builder.append_basic_block("tile.done")
        switch = builder.switch(key, done)
        for r in row_counts(tile_rows):
            for s in range(1, tile_strips + 1):
                for last in lasts:
                    block = builder.append_basic_block(f"tile.{r}x{s}.{last.lanes}")
                    switch.add_case(ir.Constant(rows.type, 2 * (r * 8 + s) + (last is half)), block)
                    builder.position_at_end(block)
                    _emit_shape(lanes, [whole] * (s - 1) + [last], r, operands)
                    builder.branch(done)
        builder.position_at_end(done)

    @intrinsic(prefer_literal=True)
    def tile(typingctx, shape, a, row, rows, k0, depth, packed, strip, strips, out, column0, columns, bias,  # noqa: ANN001, ANN201
             clamps, residual, stage):
        """Rows ``row:row + rows`` of the (M, N) ``out`` at columns ``column0:column0 + columns``
        (at most ``strips`` strips from ``strip`` on) += or = (``stage``, :data:`FIRST`) the
        float32 ``a`` (M, K) at depth ``k0:k0 + depth`` times the ``packed`` B, then at the
        :data:`LAST` block the epilogue: ``clamp(y + bias)`` and with :data:`RESIDUAL`
        ``clamp(y + residual)``, the bounds in ``clamps`` (low, high, residual low, high).
        ``shape`` (a constant) indexes :data:`SHAPES`; ``rows`` is one of its
        :func:`row_counts` and ``strips`` at most its strips. ``a`` and ``out`` may be views of
        rows apart (Numba's layout "A"): the caller promises each row's values contiguous."""
        if not isinstance(shape, types.IntegerLiteral):
            raise RequireLiteralValue("a tile's shape must be a constant")
        for name, array, ndim, layouts in (("A", a, 2, "CA"), ("the output", out, 2, "CA"),
                                           ("the residual", residual, 2, "C"), ("B", packed, 1, "C"),
                                           ("the bias", bias, 1, "C"), ("the clamps", clamps, 1, "C")):
            if not (isinstance(array, types.Array) and array.ndim == ndim and array.layout in layouts
                    and array.dtype == types.float32):
                raise TypingError(f"a float32 tile's {name} is a {ndim}-D float32 array, C-contiguous"
                                  f"{' or rows of contiguous values' if layouts == 'CA' else ''}")
        tile_rows, tile_strips, lanes = SHAPES[shape.literal_value]

        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            _emit_tile(lanes, tile_rows, tile_strips, context, builder, signature, args)
            return context.get_dummy_value()
        return types.void(shape, a, types.intp, types.intp, types.intp, types.intp, packed, types.intp, types.intp, out,
                          types.intp, types.intp, bias, clamps, residual, types.intp), codegen
