"""KuiperInfer's ``Tensor<float>``, over one C-contiguous, row-major NumPy float32 array.

The engine's runs pass plain NumPy arrays between operators: the ndarray is the engine's
tensor, and the layers, kernels and graph work on it directly. ``Tensor`` is KuiperInfer's
API over such an array, for readers of the course and code written against it; a graph
accepts Tensors as inputs, and ``Tensor.numpy()`` hands over the array without a copy.

KuiperInfer stores a tensor in an ``arma::fcube`` of ``channels`` matrices of
``rows x cols``, each kept *column-major*; PyTorch exports and NumPy are *row-major*.
Here the array is row-major, so ``numpy()`` is the data itself, without a copy.
KuiperInfer's ``row_major`` flag survives on :meth:`Tensor.fill`, :meth:`Tensor.values`,
:meth:`Tensor.reshape` and :meth:`Tensor.flatten`: ``row_major=False`` means the
order of the elements in the C++ memory, i.e. for each channel its matrix column by
column (``arr[c].T`` flattened, channel after channel).

Shapes. A tensor has 1 to 4 dimensions; :meth:`Tensor.raw_shapes` is the shape as
created (the C++ drops leading 1s, so ``Tensor(1, 1, 5)`` is ``[5]`` there; here it
stays ``[1, 1, 5]``). KuiperInfer's view of it is always a cube, :meth:`Tensor.shapes` =
``[channels, rows, cols]``: a 1-D tensor of ``n`` is ``[1, 1, n]``, a 2-D
``(rows, cols)`` is ``[1, rows, cols]``. A 4-D tensor is a batch of cubes,
``(batch, channels, rows, cols)``: ``channels()/rows()/cols()`` are its last three
dimensions, ``shapes()`` describes one cube, ``batch()`` is the first dimension
(1 for the others) and ``size()`` counts every element.

Like the C++ methods, ``fill``, ``ones``, ``rand``, ``transform``, ``reshape``,
``flatten`` and ``padding`` work in place and return ``self`` for chaining (use
:meth:`Tensor.clone` first for a copy). All but ``padding`` keep the same buffer, so
arrays obtained from ``numpy()`` keep seeing the data; ``padding`` must allocate.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from kuiperinfer.errors import TensorError

__all__ = ["Tensor", "TensorCopyError"]

_MAX_DIMS = 4
_CSV_FORMAT = "%.9g"  # 9 significant digits round-trip every float32 exactly


class TensorCopyError(TensorError, ValueError):
    """``__array__(copy=False)`` was asked for a dtype that needs a copy.

    NumPy's protocol expects a ``ValueError`` here; it is also a :class:`TensorError`.
    """


def _as_int(value: Any, what: str) -> int:
    """``value`` as a Python int; bools, floats and other objects are refused."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TensorError(f"{what} must be an integer, got {value!r}")
    return int(value)


def _as_float(value: Any, what: str) -> float:
    """``value`` as a Python float, refusing non-numbers."""
    if isinstance(value, (str, bytes)):
        raise TensorError(f"{what} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError) as exc:
        raise TensorError(f"{what} must be a number, got {value!r}") from exc


def _check_shape(shapes: Sequence[Any]) -> tuple[int, ...]:
    """Validate 1 to 4 non-negative integer dimensions."""
    if isinstance(shapes, (str, bytes)) or not isinstance(shapes, (Sequence, np.ndarray)):
        raise TensorError(f"shapes must be a sequence of integers, got {shapes!r}")
    dims = tuple(_as_int(d, "a dimension") for d in shapes)
    if not 1 <= len(dims) <= _MAX_DIMS:
        raise TensorError(f"a tensor has 1 to {_MAX_DIMS} dimensions, got {len(dims)}: {list(dims)}")
    if any(d < 0 for d in dims):
        raise TensorError(f"dimensions must be non-negative, got {list(dims)}")
    return dims


def _to_float32(data: npt.ArrayLike, what: str) -> np.ndarray:
    """``data`` as a writeable C-contiguous float32 array of 1 to 4 dims, copying only if needed."""
    if not (isinstance(data, np.ndarray) and data.dtype == np.float32
            and data.flags.c_contiguous and data.flags.writeable):
        try:
            arr = np.asarray(data)
        except (TypeError, ValueError) as exc:
            raise TensorError(f"{what}: cannot make an array of {type(data).__name__}: {exc}") from exc
        if arr.dtype.kind not in "biuf":
            raise TensorError(f"{what}: needs real numbers, got dtype {arr.dtype}")
        data = np.array(arr, dtype=np.float32, order="C")
    if not 1 <= data.ndim <= _MAX_DIMS:
        raise TensorError(f"{what}: a tensor has 1 to {_MAX_DIMS} dimensions, got shape {data.shape}")
    return data


class Tensor:
    """A float32 tensor of 1 to 4 dimensions with KuiperInfer's ``Tensor<float>`` API.

    ``Tensor(size)``, ``Tensor(rows, cols)``, ``Tensor(channels, rows, cols)``,
    ``Tensor(batch, channels, rows, cols)`` or ``Tensor(shapes)`` make a tensor of
    zeros; :meth:`from_numpy` wraps existing data.

    A tensor has no ``len()`` and is not iterable (is its length the channels, the
    rows, the elements?); use ``size()``, ``shape`` or ``numpy()``.
    """

    __slots__ = ("_data",)
    __iter__ = None  # not iterable: __getitem__ alone would make it so by accident

    def __init__(self, *dims: int | Sequence[int]) -> None:
        """Zeros of the given shape: one to four ints, or one sequence of them."""
        if len(dims) == 1 and not isinstance(dims[0], (int, np.integer)):
            shape = _check_shape(dims[0])
        else:
            shape = _check_shape(dims)
        self._data = np.zeros(shape, dtype=np.float32)

    # ------------------------------------------------------------------ NumPy bridge
    @classmethod
    def from_numpy(cls, array: npt.ArrayLike) -> Tensor:
        """Wrap ``array`` without a copy if it is writeable C-contiguous float32, else convert once."""
        tensor = cls.__new__(cls)
        tensor._data = _to_float32(array, "from_numpy")
        return tensor

    def numpy(self) -> np.ndarray:
        """The underlying array itself (no copy): writes through it change the tensor."""
        return self._data

    def data(self) -> np.ndarray:
        """KuiperInfer's name for :meth:`numpy`."""
        return self._data

    def set_data(self, array: npt.ArrayLike) -> None:
        """Replace the data by ``array`` (wrapped like :meth:`from_numpy`); the shape must not change."""
        data = _to_float32(array, "set_data")
        if data.shape != self._data.shape:
            raise TensorError(f"set_data: shape {data.shape} differs from the tensor's {self._data.shape}")
        self._data = data

    def __array__(self, dtype: npt.DTypeLike = None, copy: bool | None = None) -> np.ndarray:
        """NumPy 2 protocol: the very array unless a copy or another dtype is asked for."""
        if dtype is not None and np.dtype(dtype) != self._data.dtype:
            if copy is False:
                raise TensorCopyError(f"converting a float32 tensor to {np.dtype(dtype)} needs a copy")
            return self._data.astype(dtype)
        return self._data.copy() if copy else self._data

    @property
    def dtype(self) -> np.dtype:
        """Always ``float32``."""
        return self._data.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        """The NumPy shape, i.e. :meth:`raw_shapes` as a tuple."""
        return self._data.shape

    @property
    def ndim(self) -> int:
        """Number of dimensions, 1 to 4."""
        return self._data.ndim

    # ----------------------------------------------------------------- KuiperInfer's queries
    def batch(self) -> int:
        """First dimension of a 4-D tensor; 1 for the others."""
        return self._data.shape[0] if self._data.ndim == 4 else 1

    def channels(self) -> int:
        """Number of channels (1 for 1-D and 2-D tensors)."""
        return self._data.shape[-3] if self._data.ndim >= 3 else 1

    def rows(self) -> int:
        """Number of rows (1 for a 1-D tensor)."""
        return self._data.shape[-2] if self._data.ndim >= 2 else 1

    def cols(self) -> int:
        """Number of columns: the last dimension."""
        return self._data.shape[-1]

    def size(self) -> int:
        """Number of elements (all batches included)."""
        return self._data.size

    def empty(self) -> bool:
        """True if the tensor holds no element."""
        return self._data.size == 0

    def shapes(self) -> list[int]:
        """``[channels, rows, cols]`` of one cube, whatever the number of dimensions."""
        return [self.channels(), self.rows(), self.cols()]

    def raw_shapes(self) -> list[int]:
        """The shape as created or last reshaped (1 to 4 entries)."""
        return list(self._data.shape)

    def _cube_shape(self) -> tuple[int, int, int, int]:
        """``(batch, channels, rows, cols)``: every tensor seen as a batch of cubes."""
        return (self.batch(), self.channels(), self.rows(), self.cols())

    def __repr__(self) -> str:
        """The values (abridged when large) and the shape."""
        body = np.array2string(self._data, separator=", ", threshold=64, prefix="Tensor(")
        return f"Tensor({body}, shape={self._data.shape})"

    # --------------------------------------------------------------- element access
    def _offset(self, offset: Any) -> int:
        i = _as_int(offset, "an offset")
        if not 0 <= i < self._data.size:
            raise TensorError(f"offset {i} is out of range for a tensor of {self._data.size} elements")
        return i

    def index(self, offset: int) -> float:
        """Element at ``offset`` in memory order, which is row-major here (column-major in C++)."""
        return float(self._data.reshape(-1)[self._offset(offset)])

    def set_index(self, offset: int, value: float) -> None:
        """Set the element at row-major ``offset``."""
        self._data.reshape(-1)[self._offset(offset)] = _as_float(value, "value")

    def _coords(self, coords: tuple[Any, ...]) -> tuple[int, ...]:
        """Check ``(channel, row, col)``, or ``(batch, channel, row, col)`` for a 4-D tensor."""
        names = ("batch", "channel", "row", "col") if self._data.ndim == 4 else ("channel", "row", "col")
        if len(coords) != len(names):
            raise TensorError(f"a {self._data.ndim}-D tensor is indexed by ({', '.join(names)}), "
                              f"got {len(coords)} indices")
        bounds = self._cube_shape()[-len(names):]
        checked = tuple(_as_int(v, f"the {n} index") for v, n in zip(coords, names))
        for value, name, bound in zip(checked, names, bounds):
            if not 0 <= value < bound:
                raise TensorError(f"{name} index {value} is out of range [0, {bound})")
        return checked

    def at(self, *coords: int) -> float:
        """Element at ``(channel, row, col)``, or ``(batch, channel, row, col)`` for 4-D."""
        where = self._coords(coords)
        return float(self._data.reshape(self._cube_shape())[(0,) * (4 - len(where)) + where])

    def set_at(self, *coords: int, value: float) -> None:
        """Set the element at the coordinates of :meth:`at`; ``value`` is keyword-only."""
        where = self._coords(coords)
        self._data.reshape(self._cube_shape())[(0,) * (4 - len(where)) + where] = _as_float(value, "value")

    def __getitem__(self, key: Any) -> Any:
        """NumPy indexing of the underlying array (basic slicing gives views)."""
        try:
            return self._data[key]
        except (IndexError, TypeError, ValueError) as exc:
            raise TensorError(f"bad index {key!r} for shape {self._data.shape}: {exc}") from exc

    def __setitem__(self, key: Any, value: Any) -> None:
        """NumPy assignment into the underlying array."""
        try:
            self._data[key] = value
        except (IndexError, TypeError, ValueError) as exc:
            raise TensorError(f"cannot assign to index {key!r} of shape {self._data.shape}: {exc}") from exc

    def slice(self, *where: int) -> np.ndarray:
        """Zero-copy ``rows x cols`` view of ``slice(channel)``, or ``slice(batch, channel)`` for 4-D."""
        names = ("batch", "channel") if self._data.ndim == 4 else ("channel",)
        if len(where) != len(names):
            raise TensorError(f"slice() of a {self._data.ndim}-D tensor takes ({', '.join(names)})")
        cube = self._cube_shape()
        index = ()
        for value, name, bound in zip(where, names, cube[2 - len(names):2]):
            i = _as_int(value, f"the {name} index")
            if not 0 <= i < bound:
                raise TensorError(f"{name} index {i} is out of range [0, {bound})")
            index += (i,)
        return self._data.reshape(cube)[(0,) * (2 - len(index)) + index]

    # --------------------------------------------------------------- filling
    def fill(self, value: float | npt.ArrayLike, row_major: bool = True) -> Tensor:
        """Fill with one value, or with exactly ``size()`` values read in flat order.

        ``row_major=False`` reads the values in KuiperInfer's column-major order: for each
        (batch and) channel, its matrix column by column.
        """
        if np.isscalar(value) or (isinstance(value, np.ndarray) and value.ndim == 0):
            self._data.fill(_as_float(value, "fill value"))
            return self
        values = _to_float32_flat(value)
        if values.size != self._data.size:
            raise TensorError(f"fill needs exactly {self._data.size} values, got {values.size}")
        if row_major:
            self._data.reshape(-1)[:] = values
        else:
            b, c, r, k = self._cube_shape()
            self._data.reshape(b, c, r, k)[:] = values.reshape(b, c, k, r).transpose(0, 1, 3, 2)
        return self

    def values(self, row_major: bool = True) -> np.ndarray:
        """A flat copy of the elements, row-major or in KuiperInfer's column-major order."""
        if row_major:
            return self._data.reshape(-1).copy()
        return self._data.reshape(self._cube_shape()).transpose(0, 1, 3, 2).flatten()

    def ones(self) -> Tensor:
        """Fill with 1."""
        self._data.fill(1.0)
        return self

    def rand(self, seed: int | None = None, *, uniform: bool = False) -> Tensor:
        """Fill with N(0, 1) samples (KuiperInfer's ``randn``), or U[0, 1) if ``uniform``."""
        rng = np.random.default_rng(None if seed is None else _as_int(seed, "seed"))
        draw = rng.random if uniform else rng.standard_normal
        self._data[...] = draw(self._data.shape, dtype=np.float32)
        return self

    def transform(self, fn: Callable[[Any], Any], *, elementwise: bool = False) -> Tensor:
        """Replace the data by ``fn(data)`` in place.

        By default ``fn`` is vectorised: it gets the whole array (``np.tanh``,
        ``lambda x: np.maximum(x, 0)``) and returns an array of the same shape. With
        ``elementwise=True`` it is called on every element as a float, like the C++
        ``Transform(std::function<float(float)>)``.
        """
        try:
            if elementwise:
                result = np.vectorize(lambda v: fn(float(v)), otypes=[np.float32])(self._data)
            else:
                result = np.asarray(fn(self._data), dtype=np.float32)
        except (TypeError, ValueError) as exc:
            hint = "" if elementwise else " (for a scalar function pass elementwise=True)"
            raise TensorError(f"transform: {type(exc).__name__}: {exc}{hint}") from exc
        if result.shape != self._data.shape:
            raise TensorError(f"transform: fn returned shape {result.shape}, expected {self._data.shape}")
        if result is not self._data:
            self._data[...] = result
        return self

    # --------------------------------------------------------------- shape changes
    def reshape(self, shapes: Sequence[int], row_major: bool = True) -> Tensor:
        """Reshape in place to 1 to 4 dims with the same number of elements.

        ``row_major=True`` is NumPy's reshape. ``row_major=False`` is KuiperInfer's
        ``arma::Cube::reshape``: the elements keep their column-major order (see
        :meth:`values`), which is then laid out column-major in the new shape.
        """
        shape = _check_shape(shapes)
        if int(np.prod(shape)) != self._data.size:
            raise TensorError(f"cannot reshape {self._data.size} elements into {list(shape)}")
        if row_major:
            self._data = self._data.reshape(shape)
        else:
            ordered = self.values(row_major=False)
            self._data = self._data.reshape(shape)
            self.fill(ordered, row_major=False)
        return self

    def flatten(self, row_major: bool = True) -> Tensor:
        """Reshape in place to 1-D: row-major, or in KuiperInfer's column-major order."""
        return self.reshape([self._data.size], row_major)

    def padding(self, pads: Sequence[int], padding_value: float = 0.0) -> Tensor:
        """Pad the last two dims in place by ``[up, bottom, left, right]`` with ``padding_value``.

        The tensor keeps its number of dimensions; a 1-D tensor has no rows, so only
        ``left``/``right`` may be non-zero for it. A new buffer is allocated.
        """
        if isinstance(pads, (str, bytes)) or not isinstance(pads, (Sequence, np.ndarray)) or len(pads) != 4:
            raise TensorError(f"padding takes [up, bottom, left, right], got {pads!r}")
        up, bottom, left, right = (_as_int(p, "a pad") for p in pads)
        if min(up, bottom, left, right) < 0:
            raise TensorError(f"pads must be non-negative, got {[up, bottom, left, right]}")
        if self._data.ndim == 1 and (up or bottom):
            raise TensorError("a 1-D tensor has no rows to pad; reshape it to 2-D first")
        value = _as_float(padding_value, "padding_value")
        widths = [(0, 0)] * (self._data.ndim - 1) + [(left, right)]
        if self._data.ndim >= 2:
            widths[-2] = (up, bottom)
        self._data = np.pad(self._data, widths, constant_values=value)
        return self

    def clone(self) -> Tensor:
        """A deep copy."""
        return type(self).from_numpy(self._data.copy())

    # --------------------------------------------------------------- printing
    def show(self) -> str:
        """Print the tensor channel by channel (as KuiperInfer does) and return the text."""
        b, c, r, k = self._cube_shape()
        cubes = self._data.reshape(b, c, r, k)
        parts = []
        for n in range(b):
            for ch in range(c):
                title = f"Batch: {n}, Channel: {ch}" if self._data.ndim == 4 else f"Channel: {ch}"
                parts.append(f"{title}\n{np.array2string(cubes[n, ch], threshold=10_000)}")
        text = "\n".join(parts)
        print(text)
        return text

    # --------------------------------------------------------------- CSV
    def save_csv(self, path: str | os.PathLike[str]) -> None:
        """Write comma-separated rows, the matrix format KuiperInfer's CSVDataLoader reads.

        1-D: one line; 2-D: one line per row. 3-D: the channels' matrices one after
        the other, separated by one empty line. 4-D: the batch's cubes separated by
        two empty lines. Leading dims of 1 are not written (see :meth:`load_csv`).
        """
        if self.empty():
            raise TensorError(f"{os.fspath(path)}: cannot save an empty tensor")
        b, c, r, k = self._cube_shape()
        cubes = self._data.reshape(b, c, r, k)
        try:
            with open(path, "w", encoding="utf-8", newline="\n") as fh:
                for n in range(b):
                    for ch in range(c):
                        if n or ch:
                            fh.write("\n\n" if ch == 0 else "\n")
                        np.savetxt(fh, cubes[n, ch], fmt=_CSV_FORMAT, delimiter=",")
        except OSError as exc:
            raise TensorError(f"{os.fspath(path)}: cannot write: {exc.strerror or exc}") from exc

    @classmethod
    def load_csv(cls, path: str | os.PathLike[str]) -> Tensor:
        """Read a file written by :meth:`save_csv` (or a plain KuiperInfer CSV matrix).

        The result has the fewest dims the layout shows: one matrix gives a 2-D
        ``(rows, cols)`` tensor (a 1-D tensor comes back as ``(1, n)``), matrices
        separated by one empty line a 3-D one, cubes separated by two a 4-D one.
        Ragged rows, non-numeric cells and unreadable files raise
        :class:`TensorError` naming the file and the 1-based line.
        """
        name = os.fspath(path)
        try:
            with open(path, encoding="utf-8-sig") as fh:
                lines = fh.read().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise TensorError(f"{name}: cannot read: {reason}") from exc
        cubes: list[list[tuple[int, list[np.ndarray]]]] = [[]]  # cubes of (first line, rows)
        cols = None
        blanks = 0
        for lineno, line in enumerate(lines, start=1):
            if not line.strip():
                blanks += 1
                continue
            if cols is None and blanks:
                raise TensorError(f"{name}:1: the file starts with an empty line")
            if blanks > 2:
                raise TensorError(f"{name}:{lineno}: more than two empty lines in a row")
            if blanks == 2:
                cubes.append([])
            if cols is None or blanks:
                cubes[-1].append((lineno, []))
            blanks = 0
            row = _parse_csv_row(line, name, lineno)
            if cols is None:
                cols = row.size
            elif row.size != cols:
                raise TensorError(f"{name}:{lineno}: {row.size} values, but the first row has {cols}")
            cubes[-1][-1][1].append(row)
        if cols is None:
            raise TensorError(f"{name}: no data")
        channels, rows = len(cubes[0]), len(cubes[0][0][1])
        for cube in cubes:
            if len(cube) != channels:
                raise TensorError(f"{name}:{cube[0][0]}: a cube of {len(cube)} channels, "
                                  f"but the first has {channels}")
            for start, matrix in cube:
                if len(matrix) != rows:
                    raise TensorError(f"{name}:{start}: a matrix of {len(matrix)} rows, "
                                      f"but the first has {rows}")
        data = np.array([[m for _, m in cube] for cube in cubes], dtype=np.float32)
        if len(cubes) == 1:
            data = data[0] if channels > 1 else data[0, 0]
        return cls.from_numpy(data)


def _to_float32_flat(values: npt.ArrayLike) -> np.ndarray:
    """``values`` as a flat float32 array (a copy only when needed)."""
    try:
        arr = np.asarray(values)
    except (TypeError, ValueError) as exc:
        raise TensorError(f"fill: cannot make an array of the values: {exc}") from exc
    if arr.dtype.kind not in "biuf":
        raise TensorError(f"fill: needs real numbers, got dtype {arr.dtype}")
    return arr.astype(np.float32, copy=False).reshape(-1)


def _parse_csv_row(line: str, path: str, lineno: int) -> np.ndarray:
    """One CSV line as float32 values, naming the file, line and cell on failure."""
    cells = line.split(",")
    try:
        return np.array(cells, dtype=np.float32)
    except ValueError as exc:
        for col, cell in enumerate(cells, start=1):
            try:
                np.float32(cell)
            except ValueError:
                raise TensorError(f"{path}:{lineno}: cell {col} is not a number: {cell.strip()!r}") from None
        raise TensorError(f"{path}:{lineno}: {exc}") from exc
