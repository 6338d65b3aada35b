"""The matrix engine's products, compiled: register tiles (:mod:`.tiles`) over blocks of a
product's rows and strips, each tile's epilogue fused into its store.

A block of a product ``C = A B`` runs, for each panel of ``strips`` strips of the packed
B, its rows ``rows`` at a time through one register tile (a partial panel at the right
through a narrower one), and finishes each row of the tile while it is in cache:

``y = (acc - correction[n]) * scale[n]``, then ``activation(y + bias)``, then, with a
residual, ``residual_activation(y + residual)``, stored as float32 or requantized to uint8
(``clip(rint(y / scale) + zero_point, 0, 255)``, as :func:`~kuiperinfer.kernels.matrix.int8.quantize`).

For int8 the accumulators are the exact int32 sums of uint8 activations times int8 weights,
``correction`` the zero point times each column's sum of weights and ``scale`` the
activations' scale times each column's; for bf16 the float32 sums, no correction, scale 1.
The steps are separate passes over the tile's row, each rounded as the NumPy reference
rounds it (:mod:`kuiperinfer.kernels.matrix.products`).

float32 products take the FMA tiles of :mod:`.float_tiles`, which store their sums into the
output themselves, the epilogue's clamps in registers (:func:`float_blocks`); only the
other activations make a pass over a tile's rows.
"""

from __future__ import annotations

import numpy as np

from kuiperinfer.kernels.compiled import amx_tiles
from kuiperinfer.kernels.compiled.activation import (
    CLIP,
    NONE,
    RELU,
    ActivationCode,
    finish_row,
    finish_vector,
    in_registers,
)
from kuiperinfer.kernels.compiled.amx_tiles import configure_tiles, hold_rows, release_tiles, tile_config, tile_product
from kuiperinfer.kernels.compiled.epilogue import requantized
from kuiperinfer.kernels.compiled.float_tiles import FIRST, LAST, RESIDUAL, row_counts
from kuiperinfer.kernels.compiled.float_tiles import SHAPES as FLOAT_SHAPES
from kuiperinfer.kernels.compiled.float_tiles import tile as float_tile
from kuiperinfer.kernels.compiled.tiles import tile
from kuiperinfer.kernels.compiled.vectors import (
    LANES,
    load,
    load_dequantized,
    store_output,
)
from kuiperinfer.kernels.jit import inline, kernel

VNNI, AVX2, BF16, AMX_INT8, AMX_BF16, FMA512, FMA256 = range(7)
"""The kernels' codes: the tiles' dots (:data:`kuiperinfer.kernels.compiled.tiles.DOTS`), the
AMX tiles (:mod:`.amx_tiles`) of int8 and of bf16, then the float32 tiles
(:data:`kuiperinfer.kernels.compiled.float_tiles.SHAPES`)."""
VNNI_ROWS, VNNI_STRIPS = 6, 4
AVX2_ROWS, AVX2_STRIPS = 4, 3
BF16_ROWS, BF16_STRIPS = 6, 4
"""Rows and strips of B of each dot's register tile: as many accumulators as leave registers
for the strips of B and the broadcast row (32 zmm registers; 16 ymm on an AVX2 CPU)."""
AMX_STRIPS = 2
"""Strips of B of an AMX product: two tiles of A's rows by two of B's strips, in four tiles of sums."""
TILES = ((VNNI_ROWS, VNNI_STRIPS, 16), (AVX2_ROWS, AVX2_STRIPS, 8), (BF16_ROWS, BF16_STRIPS, 16),
         *[(amx_tiles.ROWS, AMX_STRIPS, amx_tiles.STRIP_COLUMNS)] * 2, *FLOAT_SHAPES)
"""Per kernel, its tile's rows, strips and output columns per strip."""


ACTIVATION, RESIDUAL_ACTIVATION, RESIDUAL_SCALE, RESIDUAL_ZERO, OUT_SCALE, OUT_ZERO = 0, 3, 6, 7, 8, 9
"""Where the epilogue's numbers are in its float32 array: two activations (code, and two
parameters each: :class:`~kuiperinfer.kernels.compiled.activation.ActivationCode`), the
residual's scale and zero point, the output's (one array, since a call's arguments each
cost time to pass)."""
EPILOGUE_NUMBERS = 10


def epilogue_numbers(activation: ActivationCode, residual_activation: ActivationCode, residual_scale: float,
                     residual_zero: int, out_scale: float, out_zero: int) -> np.ndarray:
    """The epilogue's numbers as :func:`blocks` takes them."""
    return np.array([*activation, *residual_activation, residual_scale, residual_zero, out_scale, out_zero],
                    np.float32)


@inline
def finished_sums(values: np.ndarray, bias: np.ndarray, at: tuple[int, int], k: int, count,  # noqa: ANN001, ANN201
                  activation: tuple[int, np.float32, np.float32]):
    """``activation(y + bias)`` of the sums ``values`` and ``bias`` from their flat elements
    ``at`` on, plus ``k``, as a vector (``count``: the first lanes)."""
    code, a, b = activation
    return finish_vector(load(values, at[0] + k, count) + load(bias, at[1] + k, count), code, a, b)


@inline
def finish_vectors(values: np.ndarray, bias: np.ndarray, target: np.ndarray, at: tuple[int, int, int], n: int,
                   activation: tuple[int, np.float32, np.float32], out_form: tuple[np.float32, np.float32]) -> None:
    """:func:`finish`'s steps on a run of ``n`` sums in one pass of vectors where the
    activation is one computed in registers (:func:`~.activation.in_registers`: the clamps,
    leaky ReLU, hardsigmoid, hardswish) and no residual is added: ``activation(y + bias)``,
    stored as float32 or requantized; the run starts at the flat elements ``at`` of the sums,
    the bias and the target (the arrays whole, not slices of them, which Numba would count
    references to on every run). A run's tail is its last whole vector again, overlapping the
    one before (the same values stored twice), and only a run shorter than a vector takes a
    masked one: a row of 24 columns takes two vectors, not 24 scalar steps."""
    out_scale, out_zero = out_form
    if n < LANES:
        store_output(target, at[2], finished_sums(values, bias, at, 0, n, activation), n, out_scale, out_zero)
    else:
        for step in range(-(-n // LANES)):
            k = min(step * LANES, n - LANES)
            store_output(target, at[2] + k, finished_sums(values, bias, at, k, None, activation), None, out_scale,
                         out_zero)


@inline
def finish_vectors_added(values: np.ndarray, bias: np.ndarray, added: np.ndarray, target: np.ndarray,
                         at: tuple[int, int, int], n: int, activations: tuple[int, np.float32, np.float32, int,
                                                                              np.float32, np.float32],
                         added_form: tuple[np.float32, np.float32], out_form: tuple[np.float32, np.float32]) -> None:
    """:func:`finish_vectors` where both activations are computed in registers (``activations``:
    the activation's code and parameters, then the residual's):
    ``residual_activation(activation(y + bias) + added)`` with the residual ``added`` (as the
    target, from its flat element ``at[2]``) float32 as it is or uint8 dequantized by
    ``added_form``, stored as float32 or requantized; the numbers of the separate passes, each
    step rounded alike (the vectors' instructions are never fused)."""
    activation = activations[:3]
    residual_code, residual_a, residual_b = activations[3:]
    added_scale, added_zero = added_form
    out_scale, out_zero = out_form
    if n < LANES:
        v = finished_sums(values, bias, at, 0, n, activation) + load_dequantized(added, at[2], n, added_scale,
                                                                                  added_zero)
        store_output(target, at[2], finish_vector(v, residual_code, residual_a, residual_b), n, out_scale, out_zero)
    else:
        for step in range(-(-n // LANES)):
            k = min(step * LANES, n - LANES)
            v = finished_sums(values, bias, at, k, None, activation) + load_dequantized(added, at[2] + k, None,
                                                                                         added_scale, added_zero)
            store_output(target, at[2] + k, finish_vector(v, residual_code, residual_a, residual_b), None, out_scale,
                         out_zero)


@inline
def dequantized(added: np.ndarray, scale: np.float32, zero_point: np.float32, scratch: np.ndarray) -> np.ndarray:
    """A residual's run of values ``added`` as float32, ``(added - zero_point) * scale``, in the
    first values of ``scratch`` (as they are where ``added`` is float32 already, scale 1, zero 0)."""
    for k in range(added.shape[0]):
        scratch[k] = (np.float32(added[k]) - zero_point) * scale
    return scratch[:added.shape[0]]


@inline
def stored(values: np.ndarray, target: np.ndarray, out_form: tuple[np.float32, np.float32]) -> None:
    """``values`` into ``target``: as they are, or requantized (``out_form``: scale, zero
    point) into a uint8 one."""
    out_scale, out_zero = out_form
    if target.itemsize == 1:
        for k in range(values.shape[0]):
            target[k] = np.uint8(requantized(values[k], out_scale, out_zero))
    else:
        for k in range(values.shape[0]):
            target[k] = values[k]


@inline
def row_of(array: np.ndarray, at: int, columns: int, count: int, start: int, whole: bool) -> np.ndarray:
    """What :func:`finish` reads or writes of row ``at`` of the output or the residual: its
    ``columns`` from ``start`` on, or, where the rows are ``whole``, ``count`` values from
    the row's start on."""
    return array.reshape(-1)[at * columns:at * columns + count] if whole else array[at, start:start + columns]


@inline
def finish(sums: np.ndarray, rows: int, width: int, skip: int, row0: int, column0: int, columns: int, first: int,
           bias: np.ndarray, residual: np.ndarray, out: np.ndarray, numbers: np.ndarray, whole: bool,
           biases: np.ndarray, scratch: np.ndarray) -> None:
    """The epilogue of the tiles' sums ``sums`` (``rows`` rows of ``width`` values, the first
    ``skip`` of each left out) into ``columns`` columns of the product from ``column0`` on,
    rows from ``row0`` on, by the ``numbers`` of :func:`epilogue_numbers`; ``out`` (and the
    residual) hold the product's columns from ``first`` on. An empty ``residual`` adds none;
    a uint8 ``out`` is requantized (a float32 one takes the values as they are). Where the
    rows are ``whole`` (``out``'s are the block's columns and the sums' rows as wide, one run
    of memory each), each step is one pass over all of them (the bias repeated in
    ``biases``); else each step goes row by row. Activations computed in registers take one
    pass of vectors (:func:`finish_vectors`, :func:`finish_vectors_added`); others a pass per
    step, ``scratch`` holding the dequantized residual. Each case has its own loop over the
    rows: a branch inside one kept LLVM from vectorising the passes (a quarter of the speed)."""
    code, low, high = int(numbers[ACTIVATION]), numbers[ACTIVATION + 1], numbers[ACTIVATION + 2]
    residual_code = int(numbers[RESIDUAL_ACTIVATION])
    residual_low, residual_high = numbers[RESIDUAL_ACTIVATION + 1], numbers[RESIDUAL_ACTIVATION + 2]
    residual_scale, residual_zero = numbers[RESIDUAL_SCALE], numbers[RESIDUAL_ZERO]
    out_form = (numbers[OUT_SCALE], numbers[OUT_ZERO])
    start = column0 - first
    count = rows * columns if whole else columns
    rounds = 1 if whole else rows
    row_bias = biases[:count] if whole else bias[column0:column0 + columns]
    as_is = residual.itemsize == 4 and residual_scale == 1 and residual_zero == 0
    every_bias, bias_at = (biases, 0) if whole else (bias, column0)
    if in_registers(code) and residual.size == 0:   # every step in one pass
        for i in range(rounds):
            at = (i * width + skip, bias_at, (row0 + i) * out.shape[1] + start)
            finish_vectors(sums, every_bias, out, at, count, (code, low, high), out_form)
    elif in_registers(code) and in_registers(residual_code) and (as_is or residual.itemsize == 1):   # so too,
        activations = (code, low, high, residual_code, residual_low, residual_high)   # a float32 residual as it
        for i in range(rounds):                                                       # is, or a uint8 one
            at = (i * width + skip, bias_at, (row0 + i) * out.shape[1] + start)
            finish_vectors_added(sums, every_bias, residual, out, at, count, activations,
                                 (residual_scale, residual_zero), out_form)
    elif residual.size:
        for i in range(rounds):
            at = row0 + i
            values = sums[i * width + skip:i * width + skip + count]
            finish_row(values, row_bias, code, low, high)
            added = dequantized(row_of(residual, at, columns, count, start, whole), residual_scale, residual_zero,
                                scratch)
            finish_row(values, added, residual_code, residual_low, residual_high)
            stored(values, row_of(out, at, columns, count, start, whole), out_form)
    else:
        for i in range(rounds):
            values = sums[i * width + skip:i * width + skip + count]
            finish_row(values, row_bias, code, low, high)
            stored(values, row_of(out, row0 + i, columns, count, start, whole), out_form)


@inline
def panel(dot: int, a: np.ndarray, row: int, valid: int, packed: np.ndarray, offset: int, strip_bytes: int,
          correction: np.ndarray, scale: np.ndarray, column0: int, y: np.ndarray, y_start: int, y_stride: int,
          rows: int, strips: int) -> None:
    """The :func:`~kuiperinfer.kernels.compiled.tiles.tile` of ``rows`` rows (a constant) and
    ``strips`` strips, at most 4: one of the four tiles as wide."""
    if strips >= 4:
        tile(dot, a, row, valid, packed, offset, strip_bytes, correction, scale, column0, y, y_start, y_stride, rows, 4)
    elif strips == 3:
        tile(dot, a, row, valid, packed, offset, strip_bytes, correction, scale, column0, y, y_start, y_stride, rows, 3)
    elif strips == 2:
        tile(dot, a, row, valid, packed, offset, strip_bytes, correction, scale, column0, y, y_start, y_stride, rows, 2)
    else:
        tile(dot, a, row, valid, packed, offset, strip_bytes, correction, scale, column0, y, y_start, y_stride, rows, 1)


CHUNK_ROWS = 96
"""Rows of a block the tiles fill before the epilogue finishes them, while they are in cache."""


@inline
def chunk_buffers(parts: np.ndarray, first: int, last: int, lanes: int,
                  spare_rows: int) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """For blocks ``first:last`` of ``parts``: the rows of a chunk (at most
    :data:`CHUNK_ROWS`), and buffers of a chunk of the widest block for the sums (with
    ``spare_rows`` rows more), the biases and :func:`finish`'s scratch."""
    widest = tallest = 0
    for part in range(first, last):
        widest = max(widest, (parts[part, 3] - parts[part, 2]) * lanes)
        tallest = min(CHUNK_ROWS, max(tallest, parts[part, 1] - parts[part, 0]))
    return (tallest, np.empty((tallest + spare_rows) * widest, np.float32), np.empty(tallest * widest, np.float32),
            np.empty(tallest * widest, np.float32))


@inline
def block_columns(block: np.ndarray, lanes: int, columns: tuple[int, int], out_columns: int, bias: np.ndarray,
                  biases: np.ndarray, tallest: int) -> tuple[int, int, int, bool]:
    """Of a ``block`` of parts (rows start, stop, strips start, stop): its width in columns,
    its first column within the product's ``columns`` and their count, and whether it spans
    every column of the output, its sums' rows as wide (then ``biases`` is filled with
    ``tallest`` rows of its bias)."""
    start, stop = columns
    width = (block[3] - block[2]) * lanes
    column0 = max(block[2] * lanes, start)
    count = min(block[3] * lanes, stop) - column0
    whole = column0 == block[2] * lanes and count == out_columns == width
    if whole:
        for i in range(tallest):
            biases[i * count:(i + 1) * count] = bias[column0:column0 + count]
    return width, column0, count, whole


@inline
def blocks(dot: int, rows: int, strips: int, lanes: int, a: np.ndarray, packed: np.ndarray,
           strip_bytes: int, parts: np.ndarray, first: int, last: int, columns: tuple[int, int],
           correction: np.ndarray, scale: np.ndarray, bias: np.ndarray, residual: np.ndarray, out: np.ndarray,
           numbers: np.ndarray) -> None:
    """Blocks ``first:last`` of ``parts`` (rows start, stop, strips start, stop each) of the
    product of ``a`` and ``packed`` through the register tiles of ``dot`` (``rows`` by
    ``strips`` of ``lanes`` columns, constants) into the product's ``columns`` (start, stop),
    which ``out`` (C-contiguous) holds: :data:`CHUNK_ROWS` rows at a time, every strip's tiles
    into a buffer of sums, then :func:`finish`."""
    start = columns[0]
    tallest, sums, biases, scratch = chunk_buffers(parts, first, last, lanes, rows)
    for part in range(first, last):
        row0, row1, strip0, strip1 = parts[part]
        width, column0, count, whole = block_columns(parts[part], lanes, columns, out.shape[1], bias, biases,
                                                   tallest)
        for chunk in range(row0, row1, tallest):
            end = min(row1, chunk + tallest)
            for strip in range(strip0, strip1, strips):
                left = min(strips, strip1 - strip)
                offset, y_column = strip * strip_bytes, (strip - strip0) * lanes
                row = chunk
                while row < end:
                    valid = min(rows, end - row)
                    y_start = (row - chunk) * width + y_column
                    if 2 * valid > rows:   # a whole tile, its rows past the last reading the last again
                        panel(dot, a, row, valid, packed, offset, strip_bytes, correction, scale, strip * lanes, sums,
                              y_start, width, rows, left)
                    else:                  # rows one at a time
                        valid = 1
                        panel(dot, a, row, valid, packed, offset, strip_bytes, correction, scale, strip * lanes, sums,
                              y_start, width, 1, left)
                    row += valid
            finish(sums, end - chunk, width, column0 - strip0 * lanes, chunk, column0, count, start, bias, residual,
                   out, numbers, whole, biases, scratch)


def _blocks_of(dot: int, rows: int, strips: int, lanes: int, what: str):  # noqa: ANN202
    """The compiled :func:`blocks` of one dot, its tile's size constants in the code."""

    def product(a, packed, strip_bytes, parts, first, last, columns, correction, scale, bias, residual,  # noqa: ANN001
                out, numbers) -> None:
        blocks(dot, rows, strips, lanes, a, packed, strip_bytes, parts, first, last, columns, correction, scale,
               bias, residual, out, numbers)
    product.__name__ = product.__qualname__ = f"{what}_blocks"
    product.__doc__ = f":func:`blocks` through {what} tiles."
    return kernel(product)


@inline
def amx_product(kind: int, held: np.ndarray, packed: np.ndarray, offset: int, strip_bytes: int,
                correction: np.ndarray, scale: np.ndarray, column0: int, y: np.ndarray, y_start: int, y_stride: int,
                valid: int, strips: int) -> None:
    """The :func:`~kuiperinfer.kernels.compiled.amx_tiles.tile_product` of ``valid`` rows held
    and ``strips`` strips (1 or 2): of one tile of rows or two."""
    if valid > amx_tiles.TILE_ROWS:
        if strips == 2:
            tile_product(kind, held, packed, offset, strip_bytes, correction, scale, column0, y, y_start, y_stride,
                         valid, 2, 2)
        else:
            tile_product(kind, held, packed, offset, strip_bytes, correction, scale, column0, y, y_start, y_stride,
                         valid, 2, 1)
    elif strips == 2:
        tile_product(kind, held, packed, offset, strip_bytes, correction, scale, column0, y, y_start, y_stride,
                     valid, 1, 2)
    else:
        tile_product(kind, held, packed, offset, strip_bytes, correction, scale, column0, y, y_start, y_stride,
                     valid, 1, 1)


@inline
def amx_blocks(kind: int, a: np.ndarray, packed: np.ndarray, strip_bytes: int, parts: np.ndarray, first: int,
               last: int, columns: tuple[int, int], correction: np.ndarray, scale: np.ndarray, bias: np.ndarray,
               residual: np.ndarray, out: np.ndarray, numbers: np.ndarray) -> None:
    """:func:`blocks` on the AMX tiles of ``kind`` (a constant): per block of 32 rows, the rows
    copied into a buffer with their depth padded with zeros to whole tiles (what the packed
    weights hold there, padding or the next strip's first groups, counts for nothing), then
    multiplied by each pair
    of strips over the whole depth, their sums stored as :func:`blocks`'s tiles store theirs
    into the buffer :func:`finish` finishes."""
    start = columns[0]
    lanes = amx_tiles.STRIP_COLUMNS
    tallest, sums, biases, scratch = chunk_buffers(parts, first, last, lanes, 0)
    depth = strip_bytes // lanes
    held = np.zeros((amx_tiles.ROWS, depth + -depth % amx_tiles.TILE_BYTES), np.uint8)
    configure_tiles(tile_config())
    for part in range(first, last):
        row0, row1, strip0, strip1 = parts[part]
        width, column0, count, whole = block_columns(parts[part], lanes, columns, out.shape[1], bias, biases,
                                                   tallest)
        for chunk in range(row0, row1, tallest):
            end = min(row1, chunk + tallest)
            for row in range(chunk, end, amx_tiles.ROWS):
                valid = min(amx_tiles.ROWS, end - row)
                hold_rows(a, row, valid, held)
                for strip in range(strip0, strip1, AMX_STRIPS):
                    amx_product(kind, held, packed, strip * strip_bytes, strip_bytes, correction, scale, strip * lanes,
                                sums, (row - chunk) * width + (strip - strip0) * lanes, width, valid,
                                min(AMX_STRIPS, strip1 - strip))
            finish(sums, end - chunk, width, column0 - strip0 * lanes, chunk, column0, count, start, bias, residual,
                   out, numbers, whole, biases, scratch)
    release_tiles()


def _amx_blocks_of(kind: int, what: str):  # noqa: ANN202
    """The compiled :func:`amx_blocks` of one kind of AMX tiles."""

    def product(a, packed, strip_bytes, parts, first, last, columns, correction, scale, bias, residual,  # noqa: ANN001
                out, numbers) -> None:
        amx_blocks(kind, a, packed, strip_bytes, parts, first, last, columns, correction, scale, bias, residual, out,
                   numbers)
    product.__name__ = product.__qualname__ = f"{what}_blocks"
    product.__doc__ = f":func:`amx_blocks` through {what} tiles."
    return kernel(product)


DOT_BLOCKS = (*(_blocks_of(dot, rows, strips, lanes, what)
                for dot, ((rows, strips, lanes), what) in enumerate(zip(TILES, ("vnni", "avx2", "bf16")))),
              _amx_blocks_of(amx_tiles.INT8, "amx_int8"), _amx_blocks_of(amx_tiles.BF16, "amx_bf16"))


@kernel
def round_bf16_bits(x: np.ndarray, out: np.ndarray) -> None:
    """``out`` = float32 ``x`` rounded to bfloat16 (to nearest, ties to even; NaN to NaN), as
    uint16 bit patterns: the compiled twin of
    :func:`~kuiperinfer.kernels.matrix.products.bf16_bits` (both C-contiguous, of one shape)."""
    bits, target = x.reshape(-1).view(np.uint32), out.reshape(-1)
    for i in range(bits.size):
        b = bits[i]
        rounded = (b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
        target[i] = np.uint16(0x7FC0) if (b & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000) else np.uint16(rounded)


@kernel
def quantize_values(x: np.ndarray, scale: np.float32, zero_point: np.float32, out: np.ndarray) -> None:
    """``out`` = float32 ``x`` quantized to uint8, ``clip(rint(x / scale) + zero_point, 0, 255)``:
    the compiled twin of :func:`~kuiperinfer.kernels.matrix.int8.quantize` (both C-contiguous,
    of one shape)."""
    values, target = x.reshape(-1), out.reshape(-1)
    for i in range(values.size):
        target[i] = np.uint8(requantized(values[i], scale, zero_point))


# -- float32 ---------------------------------------------------------------------------------

DEPTH_BLOCK = 512
"""Steps of the depth a tile sums before it adds the sums into the output: float32's rounding
then grows as BLAS's does over a deep product (a sum of thousands of steps in one accumulator
strays 3-4 times further from the exact value), and a tile's strips of B over a block (64 KiB
for a 512-bit tile) stay in L2 while the tiles of every row read them."""
ROW_BLOCK_BYTES = 512 << 10
"""Bytes of A and of the output a block of rows holds at most (half of a 1 MiB L2), where
they stay while every block of columns multiplies them."""
COLUMN_BLOCK_BYTES = 128 << 10
"""Bytes of B over a block of the depth that a tile's rows are multiplied by, panel after
panel, before the next rows: B stays in L2, the tile's rows of A in L1, and the output is
written a row's block of columns at a time, in order (written a panel at a time down all its
rows, the output of a product of 100,000 rows took twice NumPy's time)."""
LOWEST_FLOAT, HIGHEST_FLOAT = np.float32(-np.inf), np.float32(np.inf)


@inline
def clamp_of(code: int, low: np.float32, high: np.float32) -> tuple[bool, np.float32, np.float32]:
    """Whether an activation is a clamp (none, ReLU, clip) that the tiles apply in registers,
    and its bounds."""
    if code == NONE:
        return True, LOWEST_FLOAT, HIGHEST_FLOAT
    if code == RELU:
        return True, np.float32(0), HIGHEST_FLOAT
    if code == CLIP:
        return True, low, high
    return False, LOWEST_FLOAT, HIGHEST_FLOAT


@inline
def tile_rows(left: int, counts: tuple[int, ...]) -> int:
    """The most rows of ``counts`` (largest first) that ``left`` rows hold."""
    for count in counts:
        if count <= left:
            return count
    return 1


@inline
def finish_in_place(out: np.ndarray, row: int, rows: int, column0: int, columns: int, zeros: np.ndarray,
                    residual: np.ndarray, numbers: np.ndarray) -> None:
    """The activations the tiles do not apply, on a tile's stored rows (its bias added): the
    activation, then the residual and its activation."""
    stop = column0 + columns
    code, low, high = int(numbers[ACTIVATION]), numbers[ACTIVATION + 1], numbers[ACTIVATION + 2]
    residual_code = int(numbers[RESIDUAL_ACTIVATION])
    residual_low, residual_high = numbers[RESIDUAL_ACTIVATION + 1], numbers[RESIDUAL_ACTIVATION + 2]
    for i in range(row, row + rows):
        values = out[i, column0:stop]
        finish_row(values, zeros[column0:stop], code, low, high)
        if residual.size:
            finish_row(values, residual[i, column0:stop], residual_code, residual_low, residual_high)


@inline
def float_blocks(shape: int, lanes: int, strips: int, counts: tuple[int, ...], a: np.ndarray, packed: np.ndarray,
                 parts: np.ndarray, first: int, last: int, columns: tuple[int, int], bias: np.ndarray,
                 residual: np.ndarray, out: np.ndarray, numbers: np.ndarray) -> None:
    """Blocks ``first:last`` of ``parts`` of the float32 product of ``a`` and ``packed``
    through the FMA tiles of ``shape`` (``lanes``, ``strips`` and the row ``counts`` its
    constants) into the product's ``columns`` (start, a multiple of ``lanes``, and stop), which
    ``out`` (C-contiguous) and the residual hold: per block of rows, per block of the depth,
    per panel of ``strips`` strips, the rows a tile at a time; the epilogue in the tiles where
    it is a clamp, else on a tile's rows across its block of strips after the last block of the
    depth (one call per row, not per panel)."""
    k = a.shape[1]
    start = columns[0]
    n = out.shape[1]
    bias = bias[start:]
    in_tiles, low, high = clamp_of(int(numbers[ACTIVATION]), numbers[ACTIVATION + 1], numbers[ACTIVATION + 2])
    residual_clamp, residual_low, residual_high = clamp_of(int(numbers[RESIDUAL_ACTIVATION]),
                                                           numbers[RESIDUAL_ACTIVATION + 1],
                                                           numbers[RESIDUAL_ACTIVATION + 2])
    adds_residual = residual.size > 0
    in_tiles = in_tiles and (residual_clamp or not adds_residual)
    clamps = np.empty(4, np.float32)
    clamps[0], clamps[1], clamps[2], clamps[3] = low, high, residual_low, residual_high
    last_stage = LAST | (RESIDUAL if adds_residual else 0)
    if not in_tiles:
        clamps[0], clamps[1], last_stage = LOWEST_FLOAT, HIGHEST_FLOAT, LAST
    zeros = np.zeros(0 if in_tiles else n, np.float32)
    row_block = max(counts[0], ROW_BLOCK_BYTES // (4 * (n + min(k, DEPTH_BLOCK))) // counts[0] * counts[0])
    strip_block = max(strips, COLUMN_BLOCK_BYTES // (4 * lanes * max(1, min(k, DEPTH_BLOCK))) // strips * strips)
    for part in range(first, last):
        row0, row1, strip0, strip1 = parts[part]
        for block0 in range(row0, row1, row_block):
            block1 = min(row1, block0 + row_block)
            for k0 in range(0, max(k, 1), DEPTH_BLOCK):
                depth = min(DEPTH_BLOCK, k - k0)
                stage = (FIRST if k0 == 0 else 0) | (last_stage if k0 + depth == k else 0)
                for strips0 in range(strip0, strip1, strip_block):
                    strips1 = min(strip1, strips0 + strip_block)
                    row = block0
                    while row < block1:
                        rows = tile_rows(block1 - row, counts)
                        for strip in range(strips0, strips1, strips):
                            count = min(strips, strips1 - strip)
                            column0 = strip * lanes - start
                            width = min(n - column0, count * lanes)
                            float_tile(shape, a, row, rows, k0, depth, packed, strip, count, out, column0, width,
                                       bias, clamps, residual, stage)
                        if not in_tiles and stage & LAST:   # the tiles' rows across their panels at once
                            column0 = strips0 * lanes - start
                            finish_in_place(out, row, rows, column0, min(n, strips1 * lanes - start) - column0, zeros,
                                            residual, numbers)
                        row += rows


def _float_blocks_of(shape: int, what: str):  # noqa: ANN202
    """The compiled :func:`float_blocks` of one tile shape, its constants in the code."""
    rows, strips, lanes = FLOAT_SHAPES[shape]
    counts = row_counts(rows)

    def product(a, packed, parts, first, last, columns, bias, residual, out, numbers) -> None:  # noqa: ANN001
        float_blocks(shape, lanes, strips, counts, a, packed, parts, first, last, columns, bias, residual, out,
                     numbers)
    product.__name__ = product.__qualname__ = f"{what}_blocks"
    product.__doc__ = f":func:`float_blocks` through {what} tiles."
    return kernel(product)


BLOCKS = (*DOT_BLOCKS, *(_float_blocks_of(shape, what) for shape, what in enumerate(("fma512", "fma256"))))
"""The compiled product of each kernel, by its code: the dots' ``(a, packed, strip_bytes,
parts, first, last, columns, correction, scale, bias, residual, out, numbers)``, the float32
tiles' ``(a, packed, parts, first, last, columns, bias, residual, out, numbers)``."""
