"""Vectors of float32 for compiled kernels: a type that is one SIMD register, and the
operations a convolution needs on it.

LLVM vectorises a loop over an array when it can prove the loop's stores never change what
it reads; a depthwise kernel's taps and a convolution's weights, read again for every
output pixel, defeat that proof (Numba tells LLVM nothing of which arrays overlap), so the
loop reloads them for every pixel or is not vectorised at all. Kernels written with these
vectors say what each register holds instead: a :data:`Vector` is an LLVM ``<LANES x
float>`` value, which stays in a register across a loop like any local number.

* :func:`load` and :func:`store` read and write :data:`LANES` consecutive values of a
  C-contiguous array at a flat index (``count``: only the first ``count`` lanes, the
  others read as zero and left alone in memory; None: all of them). No bounds are checked.
  :func:`store_output` stores into a float32 array as :func:`store` does and into a uint8
  one quantized, as int8 hands activations on; :func:`load_dequantized` loads either back
  as float32.
* :func:`load_if` loads only where a condition holds (zeros, else), and
  :func:`load_strided` loads several vectors at once into a tuple, as registers to hold
  (:func:`store_strided` stores them).
* :func:`splat` repeats a number in every lane (:func:`load_splat`, one of an array's),
  :func:`repeat` a vector in a tuple; ``+`` and ``*`` work lane by lane, and
  :func:`multiply_add` fuses them (one FMA instruction where the CPU has it);
  :func:`multiply_add_splats` adds a row of numbers times one vector to a tuple of sums;
  :func:`rounded` keeps a product from fusing with the sum that follows it.
* :func:`where_below` and :func:`where_above` replace the lanes beyond a bound, keeping NaN
  (the comparisons are false for it), as the activations' scalar loops do.

Without Numba the same functions work on NumPy arrays of :data:`LANES` values, so the
kernels written with them still run, slowly.
"""

from __future__ import annotations

import operator

import numpy as np

from kuiperinfer.kernels.jit import AVAILABLE, numba

TARGET_FEATURES = (numba.config.CPU_FEATURES or numba.core.codegen.get_host_cpu_features()) if AVAILABLE else ""
"""The CPU features Numba compiles for: this CPU's, or ``NUMBA_CPU_FEATURES``'s."""
LANES = 16 if "+avx512f" in TARGET_FEATURES.split(",") else 8
"""Float32 lanes of a vector: 16 where the CPU has AVX-512 (one zmm register), else 8 (AVX2's ymm)."""
REGISTERS = 32 if LANES == 16 else 16
"""Vector registers the CPU has: what a kernel may hold in them at once."""

if AVAILABLE:
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic, models, overload, register_model

    class VectorType(types.Type):
        """Numba's type of a vector of :data:`LANES` float32 values."""

        def __init__(self) -> None:
            super().__init__(name=f"float32x{LANES}")

    Vector = VectorType()
    _LLVM_VECTOR = ir.VectorType(ir.FloatType(), LANES)
    _LANE_TYPES = f"v{LANES}f32"

    @register_model(VectorType)
    class _VectorModel(models.PrimitiveModel):
        def __init__(self, dmm, fe_type):  # noqa: ANN001, ANN204
            super().__init__(dmm, fe_type, _LLVM_VECTOR)

    _LLVM_BYTES = ir.VectorType(ir.IntType(8), LANES)

    _FLOATS, _BYTES = (_LLVM_VECTOR, _LANE_TYPES, 4), (_LLVM_BYTES, f"v{LANES}i8", 1)
    """What :func:`_load` and :func:`_store` move: :data:`LANES` float32 values (whatever the
    array's type, as :func:`load` and :func:`store` take it) or bytes; the LLVM vector, its
    name in the masked intrinsics' names, its alignment."""

    def _lanes_of(array_type):  # noqa: ANN001, ANN202
        """:data:`_BYTES` for a uint8 array, else :data:`_FLOATS`."""
        return _BYTES if array_type.dtype == types.uint8 else _FLOATS

    def _address(context, builder, array_type, array, index, vector=_LLVM_VECTOR):  # noqa: ANN001, ANN202
        """The address of the flat element ``index`` of a C-contiguous array, as a pointer to ``vector``."""
        data = context.make_array(array_type)(context, builder, array).data
        return builder.bitcast(builder.gep(data, [index]), vector.as_pointer())

    def _repeat(builder, value, vector_type):  # noqa: ANN001, ANN202
        """A vector of ``vector_type`` holding ``value`` in every lane."""
        one = builder.insert_element(ir.Constant(vector_type, ir.Undefined), value, ir.Constant(ir.IntType(32), 0))
        return builder.shuffle_vector(one, one, ir.Constant(ir.VectorType(ir.IntType(32), LANES), [0] * LANES))

    def _first_lanes(builder, count):  # noqa: ANN001, ANN202
        """The mask of the lanes below ``count``."""
        lane_indices = ir.Constant(ir.VectorType(ir.IntType(64), LANES), list(range(LANES)))
        return builder.icmp_unsigned("<", lane_indices, _repeat(builder, count, lane_indices.type))

    def _load(context, builder, array_type, array, index, count_type, count, lanes=_FLOATS):  # noqa: ANN001, ANN202
        vector, name, align = lanes
        pointer = _address(context, builder, array_type, array, index, vector)
        if isinstance(count_type, types.NoneType):
            return builder.load(pointer, align=align)
        mask = _first_lanes(builder, context.cast(builder, count, count_type, types.int64))
        function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(
            vector, [pointer.type, ir.IntType(32), mask.type, vector]), f"llvm.masked.load.{name}.p0")
        return builder.call(function, [pointer, ir.Constant(ir.IntType(32), align), mask, ir.Constant(vector, None)])

    @intrinsic
    def load(typingctx, array, index, count):  # noqa: ANN001, ANN201
        """The vector of ``array``'s flat elements ``index`` on (``count``: the first ``count``, then zeros)."""
        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            return _load(context, builder, signature.args[0], args[0], args[1], signature.args[2], args[2])
        return Vector(array, types.intp, count), codegen

    @intrinsic
    def load_if(typingctx, array, index, count, condition):  # noqa: ANN001, ANN201
        """:func:`load` where ``condition`` holds, else zeros: ``index`` may then lie outside the
        array, and the array's first vector is read instead (no branch; a constant condition
        costs nothing). A masked load would read nothing, but one that reaches into memory
        not mapped costs hundreds of cycles on AMD's CPUs."""
        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            condition = context.cast(builder, args[3], signature.args[3], types.boolean)
            index = builder.select(condition, args[1], ir.Constant(args[1].type, 0))
            vector = _load(context, builder, signature.args[0], args[0], index, signature.args[2], args[2])
            return builder.select(condition, vector, ir.Constant(_LLVM_VECTOR, None))
        return Vector(array, types.intp, count, types.boolean), codegen

    @intrinsic
    def load_strided(typingctx, array, start, step, n, count):  # noqa: ANN001, ANN201
        """A tuple of ``n`` (a constant) vectors: :func:`load` at ``start``, ``start + step``, ..."""
        if not isinstance(n, types.IntegerLiteral):
            return None
        loaded = types.UniTuple(Vector, n.literal_value)

        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            array_type, count_type = signature.args[0], signature.args[4]
            vectors = [_load(context, builder, array_type, args[0],
                             builder.add(args[1], builder.mul(args[2], ir.Constant(args[2].type, t))),
                             count_type, args[4]) for t in range(n.literal_value)]
            return context.make_tuple(builder, loaded, vectors)
        return loaded(array, types.intp, types.intp, n, count), codegen

    def _store(context, builder, array_type, array, index, vector, count_type, count,  # noqa: ANN001, ANN202
               lanes=_FLOATS):
        moved, name, align = lanes
        pointer = _address(context, builder, array_type, array, index, moved)
        if isinstance(count_type, types.NoneType):
            builder.store(vector, pointer, align=align)
            return
        mask = _first_lanes(builder, context.cast(builder, count, count_type, types.int64))
        function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(
            ir.VoidType(), [moved, pointer.type, ir.IntType(32), mask.type]), f"llvm.masked.store.{name}.p0")
        builder.call(function, [vector, pointer, ir.Constant(ir.IntType(32), align), mask])

    def _fenced(builder, vector):  # noqa: ANN001, ANN202
        """``vector`` behind a fence LLVM fuses no arithmetic across."""
        function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(
            _LLVM_VECTOR, [_LLVM_VECTOR]), f"llvm.arithmetic.fence.{_LANE_TYPES}")
        return builder.call(function, [vector])

    @intrinsic
    def store(typingctx, array, index, vector, count):  # noqa: ANN001, ANN201
        """Write ``vector`` to ``array``'s flat elements ``index`` on (``count``: its first ``count`` lanes)."""
        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            _store(context, builder, signature.args[0], args[0], args[1], args[2], signature.args[3], args[3])
            return context.get_dummy_value()
        return types.none(array, types.intp, Vector, count), codegen

    def _quantized(builder, vector, scale, zero_point):  # noqa: ANN001, ANN202
        """``clip(rint(vector / scale) + zero_point, 0, 255)`` as a vector of bytes (NaN: 0)."""
        rint = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_LLVM_VECTOR, [_LLVM_VECTOR]),
                                              f"llvm.rint.{_LANE_TYPES}")
        q = builder.call(rint, [builder.fdiv(vector, _repeat(builder, scale, _LLVM_VECTOR))])
        q = builder.fadd(q, _repeat(builder, zero_point, _LLVM_VECTOR))
        low, high = ir.Constant(_LLVM_VECTOR, [0.0] * LANES), ir.Constant(_LLVM_VECTOR, [255.0] * LANES)
        q = builder.select(builder.fcmp_ordered(">", q, low), q, low)
        q = builder.select(builder.fcmp_ordered("<", q, high), q, high)
        return builder.trunc(builder.fptosi(q, ir.VectorType(ir.IntType(32), LANES)), _LLVM_BYTES)

    @intrinsic
    def load_dequantized(typingctx, array, index, count, scale, zero_point):  # noqa: ANN001, ANN201
        """:func:`load` from a float32 ``array``; from a uint8 one, its values dequantized,
        ``(q - zero_point) * scale`` (the numbers of
        :func:`~kuiperinfer.kernels.matrix.int8.dequantize`: each step rounded, the product
        behind a fence, as :func:`rounded`'s, so that a sum after it does not fuse with it)."""
        if not isinstance(array, types.Array) or array.dtype not in (types.float32, types.uint8):
            return None

        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            array_type, count_type = signature.args[0], signature.args[2]
            loaded = _load(context, builder, array_type, args[0], args[1], count_type, args[2], _lanes_of(array_type))
            if array_type.dtype == types.float32:
                return loaded
            scale = context.cast(builder, args[3], signature.args[3], types.float32)
            zero_point = context.cast(builder, args[4], signature.args[4], types.float32)
            shifted = builder.fsub(builder.uitofp(loaded, _LLVM_VECTOR), _repeat(builder, zero_point, _LLVM_VECTOR))
            return _fenced(builder, builder.fmul(shifted, _repeat(builder, scale, _LLVM_VECTOR)))
        return Vector(array, types.intp, count, scale, zero_point), codegen

    @intrinsic
    def store_output(typingctx, array, index, vector, count, scale, zero_point):  # noqa: ANN001, ANN201
        """:func:`store` into a float32 ``array``; into a uint8 one, ``vector`` quantized first,
        ``clip(rint(vector / scale) + zero_point, 0, 255)`` (the numbers of
        :func:`~kuiperinfer.kernels.matrix.int8.quantize`), each lane one byte."""
        if not isinstance(array, types.Array) or array.dtype not in (types.float32, types.uint8):
            return None

        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            array_type, count_type, vector = signature.args[0], signature.args[3], args[2]
            if array_type.dtype == types.uint8:
                scale = context.cast(builder, args[4], signature.args[4], types.float32)
                zero_point = context.cast(builder, args[5], signature.args[5], types.float32)
                vector = _quantized(builder, vector, scale, zero_point)
            _store(context, builder, array_type, args[0], args[1], vector, count_type, args[3], _lanes_of(array_type))
            return context.get_dummy_value()
        return types.none(array, types.intp, Vector, count, scale, zero_point), codegen

    @intrinsic
    def store_strided(typingctx, array, start, step, vectors, count):  # noqa: ANN001, ANN201
        """:func:`store` each vector of the tuple ``vectors`` at ``start``, ``start + step``, ..."""
        if not isinstance(vectors, types.UniTuple) or vectors.dtype is not Vector:
            return None

        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            array_type, count_type = signature.args[0], signature.args[4]
            for t in range(vectors.count):
                at = builder.add(args[1], builder.mul(args[2], ir.Constant(args[2].type, t)))
                vector = builder.extract_value(args[3], t)
                _store(context, builder, array_type, args[0], at, vector, count_type, args[4])
            return context.get_dummy_value()
        return types.none(array, types.intp, types.intp, vectors, count), codegen

    @intrinsic
    def splat(typingctx, value):  # noqa: ANN001, ANN201
        """A vector holding ``value`` (a number, as float32) in every lane."""
        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            number = context.cast(builder, args[0], signature.args[0], types.float32)
            return _repeat(builder, number, _LLVM_VECTOR)
        return Vector(value), codegen

    @intrinsic
    def load_splat(typingctx, array, index):  # noqa: ANN001, ANN201
        """A vector holding ``array``'s flat element ``index`` in every lane."""
        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            data = context.make_array(signature.args[0])(context, builder, args[0]).data
            return _repeat(builder, builder.load(builder.gep(data, [args[1]]), align=4), _LLVM_VECTOR)
        return Vector(array, types.intp), codegen

    @intrinsic
    def repeat(typingctx, vector, n):  # noqa: ANN001, ANN201
        """A tuple of ``n`` (a constant) copies of ``vector``: sums to start from."""
        if not isinstance(n, types.IntegerLiteral):
            return None
        repeated = types.UniTuple(Vector, n.literal_value)

        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            return context.make_tuple(builder, repeated, [args[0]] * n.literal_value)
        return repeated(Vector, n), codegen

    @intrinsic
    def multiply_add_splats(typingctx, array, index, step, vector, sums):  # noqa: ANN001, ANN201
        """``sums[m] + array[index + m * step] * vector`` for each vector of the tuple ``sums``:
        a row of numbers times one vector, into as many sums (flat elements of a C-contiguous
        array; no bounds are checked)."""
        if not isinstance(sums, types.UniTuple) or sums.dtype is not Vector:
            return None

        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            data = context.make_array(signature.args[0])(context, builder, args[0]).data
            function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(
                _LLVM_VECTOR, [_LLVM_VECTOR] * 3), f"llvm.fmuladd.{_LANE_TYPES}")
            new = []
            for m in range(sums.count):
                at = builder.add(args[1], builder.mul(args[2], ir.Constant(args[2].type, m)))
                value = _repeat(builder, builder.load(builder.gep(data, [at]), align=4), _LLVM_VECTOR)
                new.append(builder.call(function, [value, args[3], builder.extract_value(args[4], m)]))
            return context.make_tuple(builder, sums, new)
        return sums(array, types.intp, types.intp, Vector, sums), codegen

    @intrinsic
    def multiply_add(typingctx, a, b, c):  # noqa: ANN001, ANN201
        """``a * b + c`` lane by lane, fused where the CPU can."""
        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(
                _LLVM_VECTOR, [_LLVM_VECTOR] * 3), f"llvm.fmuladd.{_LANE_TYPES}")
            return builder.call(function, args)
        return Vector(Vector, Vector, Vector), codegen

    @intrinsic
    def rounded(typingctx, vector):  # noqa: ANN001, ANN201
        """``vector`` as it is, behind a fence LLVM fuses nothing across: the product that made
        it is rounded on its own, not fused with a sum that follows into one FMA."""
        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            return _fenced(builder, args[0])
        return Vector(Vector), codegen

    def _lanewise(instruction: str):  # noqa: ANN202
        """An intrinsic applying an LLVM instruction (``fadd``, ``fsub``, ``fmul``) to two vectors."""
        @intrinsic
        def apply(typingctx, a, b):  # noqa: ANN001, ANN202
            def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
                return getattr(builder, instruction)(*args)
            return Vector(Vector, Vector), codegen
        return apply

    _add, _subtract, _multiply = _lanewise("fadd"), _lanewise("fsub"), _lanewise("fmul")

    @overload(operator.add)
    def _vector_add(a, b):  # noqa: ANN001, ANN202
        if a is Vector and b is Vector:
            return lambda a, b: _add(a, b)
        return None

    @overload(operator.sub)
    def _vector_subtract(a, b):  # noqa: ANN001, ANN202
        if a is Vector and b is Vector:
            return lambda a, b: _subtract(a, b)
        return None

    @overload(operator.mul)
    def _vector_multiply(a, b):  # noqa: ANN001, ANN202
        if a is Vector and b is Vector:
            return lambda a, b: _multiply(a, b)
        return None

    def _where(comparison: str):  # noqa: ANN202
        """An intrinsic replacing the lanes of a vector that compare so to a bound by a value."""
        @intrinsic
        def where(typingctx, vector, bound, value):  # noqa: ANN001, ANN202
            def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
                return builder.select(builder.fcmp_ordered(comparison, args[0], args[1]), args[2], args[0])
            return Vector(Vector, Vector, Vector), codegen
        return where

    where_below = _where("<")
    """``where_below(vector, bound, value)``: ``vector`` with ``value`` in the lanes below ``bound``."""
    where_above = _where(">")
    """``where_above(vector, bound, value)``: ``vector`` with ``value`` in the lanes above ``bound``."""

else:
    Vector = np.ndarray

    def load(array: np.ndarray, index: int, count: int | None) -> np.ndarray:
        """The vector of ``array``'s flat elements ``index`` on (``count``: the first ``count``, then zeros)."""
        vector = np.zeros(LANES, np.float32)
        values = array.reshape(-1)[index:index + (LANES if count is None else count)]
        vector[:len(values)] = values
        return vector

    def load_if(array: np.ndarray, index: int, count: int | None, condition: bool) -> np.ndarray:
        """:func:`load` where ``condition`` holds, else zeros."""
        return load(array, index, count) if condition else np.zeros(LANES, np.float32)

    def load_strided(array: np.ndarray, start: int, step: int, n: int, count: int | None) -> tuple[np.ndarray, ...]:
        """A tuple of ``n`` vectors: :func:`load` at ``start``, ``start + step``, ..."""
        return tuple(load(array, start + t * step, count) for t in range(n))

    def store(array: np.ndarray, index: int, vector: np.ndarray, count: int | None) -> None:
        """Write ``vector`` to ``array``'s flat elements ``index`` on (``count``: its first ``count`` lanes)."""
        lanes = LANES if count is None else count
        array.reshape(-1)[index:index + lanes] = vector[:lanes]

    def load_dequantized(array: np.ndarray, index: int, count: int | None, scale: float,
                         zero_point: float) -> np.ndarray:
        """:func:`load` from a float32 ``array``; from a uint8 one, its values dequantized."""
        vector = load(array, index, count)
        if array.dtype == np.uint8:
            vector = (vector - np.float32(zero_point)) * np.float32(scale)
        return vector

    def store_output(array: np.ndarray, index: int, vector: np.ndarray, count: int | None, scale: float,
                     zero_point: float) -> None:
        """:func:`store` into a float32 ``array``; into a uint8 one, ``vector`` quantized first."""
        if array.dtype == np.uint8:
            q = np.rint(vector / np.float32(scale)) + np.float32(zero_point)
            vector = np.clip(np.nan_to_num(q, nan=0.0), 0, 255).astype(np.uint8)
        store(array, index, vector, count)

    def store_strided(array: np.ndarray, start: int, step: int, vectors: tuple[np.ndarray, ...],
                      count: int | None) -> None:
        """:func:`store` each of ``vectors`` at ``start``, ``start + step``, ..."""
        for t, vector in enumerate(vectors):
            store(array, start + t * step, vector, count)

    def load_splat(array: np.ndarray, index: int) -> np.ndarray:
        """A vector holding ``array``'s flat element ``index`` in every lane."""
        return splat(array.reshape(-1)[index])

    def repeat(vector: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
        """A tuple of ``n`` copies of ``vector``."""
        return (vector,) * n

    def multiply_add_splats(array: np.ndarray, index: int, step: int, vector: np.ndarray,
                            sums: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        """``sums[m] + array[index + m * step] * vector`` for each vector of the tuple ``sums``."""
        flat = array.reshape(-1)
        return tuple(flat[index + m * step] * vector + total for m, total in enumerate(sums))

    def splat(value: float) -> np.ndarray:
        """A vector holding ``value`` (as float32) in every lane."""
        return np.full(LANES, value, np.float32)

    def multiply_add(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        """``a * b + c`` lane by lane."""
        return a * b + c

    def rounded(vector: np.ndarray) -> np.ndarray:
        """``vector`` as it is (NumPy rounds every step on its own)."""
        return vector

    def where_below(vector: np.ndarray, bound: np.ndarray, value: np.ndarray) -> np.ndarray:
        """``vector`` with ``value`` in the lanes below ``bound``."""
        return np.where(vector < bound, value, vector)

    def where_above(vector: np.ndarray, bound: np.ndarray, value: np.ndarray) -> np.ndarray:
        """``vector`` with ``value`` in the lanes above ``bound``."""
        return np.where(vector > bound, value, vector)
