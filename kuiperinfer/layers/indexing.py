"""Indexing: slices and selects (views of the input), where and masked_fill; gathers
(gather, index_select, narrow, masked_select, advanced indexing ``Tensor.index``) and
scatters (scatter, scatter_add, slice_scatter, select_scatter, ``Tensor.index_put``,
``Tensor.slice_copy``).

pnnx turns Python indexing into ``Tensor.slice`` and ``Tensor.select``. A chain of
them over increasing dimensions is fused into one multi-dimension slice: ``x[:, 1:3, 0]``
becomes ``dims=(1,2) starts=(1,0) ends=(3,0) steps=(1,0) selects=(2147483647,0)``.
Each ``dims`` entry is a position in that one index expression, i.e. a dimension of
the *input*; ``selects`` holds an integer index, or INT_MAX where the entry is a range.
An end of INT_MAX means "to the end". Python's slice clamps out-of-range bounds exactly
as PyTorch does, so the bounds are used as written.

Indexing with tensors (``x[:, idx]``, ``x[mask]``) becomes ``Tensor.index``, whose index
list is either an input made by a ``pnnx.Expression`` (``[None,@0]``) or, for constant
indices, the parameter ``expr=[None,[0,-1,2]]``. ``None`` there stands for a whole
dimension (``:``), not for a new axis. Assigning through such an index is
``Tensor.index_put``, through a slice ``Tensor.slice_copy``: both return a new array, the
input with the indexed elements replaced.

Gathers and scatters check every index against the dimension it indexes, so that a
hostile model or input cannot read or write outside an array (NumPy would wrap negative
indices where PyTorch refuses them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kuiperinfer.errors import ExpressionError, InferError, InferStatus
from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.expression import compile_expression
from kuiperinfer.expression.promotion import result_type
from kuiperinfer.layers.base import NonParamLayer, keeps_batch
from kuiperinfer.layers.comparison import Argument
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer

INT_MAX = 2147483647
"""pnnx's ``INT_MAX``: an open slice end, and "no select" in ``selects``."""


def _int(value: Any) -> int | None:
    """A slice bound given as a number or as a 1-element array (a run-time input)."""
    return None if value is None else int(np.asarray(value).reshape(-1)[0])


@dataclass(frozen=True)
class _Index:
    """One entry of an index expression: input dimension ``dim`` and either a ``select``
    index (the dimension disappears) or the range ``start:end:step``."""

    dim: int
    select: Argument | None
    start: Argument
    end: Argument
    step: Argument

    def resolve(self, inputs: Sequence[Any]) -> int | slice:
        if self.select is not None:
            return _int(self.select.get(inputs))
        return slice(_int(self.start.get(inputs)), _int(self.end.get(inputs)), _int(self.step.get(inputs)))


def _index_key(ndim: int, entries: Sequence[_Index], inputs: Sequence[Any]) -> tuple[int | slice, ...]:
    """The key of ``x[...]`` with each entry at its input dimension (negative dims count from the end)."""
    index: list[int | slice] = [slice(None)] * ndim
    for entry in entries:
        index[entry.dim % ndim] = entry.resolve(inputs)
    return tuple(index)


def _index_view(x: np.ndarray, entries: Sequence[_Index], inputs: Sequence[Any]) -> np.ndarray:
    """``x[...]`` with each entry at its input dimension (negative dims count from the end)."""
    return x[_index_key(x.ndim, entries, inputs)]


class _IndexLayer(NonParamLayer):
    def __init__(self, layer_name: str, entries: tuple[_Index, ...]):
        super().__init__(layer_name)
        self.entries = entries

    @classmethod
    def of(cls, op: RuntimeOperator, entries: tuple[_Index, ...]) -> _IndexLayer:
        """The layer of ``op``; it keeps samples apart when no entry indexes dimension 0."""
        layer = cls(op.name, entries)
        layer.batch_independent = all(keeps_batch(op, entry.dim) for entry in entries)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        return [_index_view(inputs[0], self.entries, inputs)]


def _constant(value: int | None) -> Argument:
    return Argument(None, value)


def _slice_entries(op: RuntimeOperator) -> tuple[_Index, ...]:
    """The index expression of a ``Tensor.slice`` or ``Tensor.slice_copy``: one dimension
    (``dim``, ``start``/``end``/``step`` as parameters or inputs, ``select`` for an integer
    index) or pnnx's fused form over several."""
    if op.has_param("dims"):
        return _fused_entries(op)
    dim = op.param_int("dim", Status.kParameterMissingDim)
    select = Argument.of(op, "select", default=INT_MAX)
    if select != _constant(INT_MAX):
        unused = _constant(None)
        return (_Index(dim, select, unused, unused, unused),)
    step = Argument.of(op, "step", default=1)
    if step == _constant(0):
        raise op.error("slice step cannot be zero", Status.kParameterInvalidValue)
    return (_Index(dim, None, Argument.of(op, "start", default=0), Argument.of(op, "end", default=INT_MAX), step),)


def _fused_entries(op: RuntimeOperator) -> tuple[_Index, ...]:
    dims = op.param_ints("dims", status=Status.kParameterMissingDim)
    n = len(dims)
    starts, ends, steps = (op.param_ints(key, n, Status.kParameterMissingShape)
                           for key in ("starts", "ends", "steps"))
    selects = op.param_ints("selects", n, Status.kParameterMissingShape, default=(INT_MAX,) * n)
    if len(set(dims)) != n:
        raise op.error(f"dims {dims} repeat a dimension", Status.kParameterInvalidValue)
    entries = []
    for dim, start, end, step, select in zip(dims, starts, ends, steps, selects):
        if select == INT_MAX and step == 0:
            raise op.error(f"slice step of dim {dim} cannot be zero", Status.kParameterInvalidValue)
        entries.append(_Index(dim, None if select == INT_MAX else _constant(select),
                              _constant(start), _constant(end), _constant(step)))
    return tuple(entries)


@register_layer("Tensor.slice")
class Slice(_IndexLayer):
    """``x[start:end:step]`` along ``dim`` (bounds may be inputs ``$start``/``$end``/``$step``),
    or pnnx's fused multi-dimension form with ``dims``/``starts``/``ends``/``steps``/``selects``."""

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Slice:
        return cls.of(op, _slice_entries(op))


@register_layer("Tensor.select", "torch.select")
class Select(_IndexLayer):
    """``x.select(dim, index)``: one index along ``dim`` (negative counts from the end);
    the index may be an input ``$index``."""

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Select:
        dim = op.param_int("dim", Status.kParameterMissingDim)
        index = Argument.of(op, "index", 1)
        unused = _constant(None)
        return cls.of(op, (_Index(dim, index, unused, unused, unused),))


@register_layer("torch.where")
class Where(NonParamLayer):
    """``torch.where(condition, input, other)``; ``input`` and ``other`` may be numbers.

    The result has PyTorch's promoted dtype: ``where(c, 1.0, 0.0)`` is float32 and
    ``where(c, 1, 0)`` int64.
    """

    def __init__(self, layer_name: str, condition: int, input: Argument, other: Argument):
        super().__init__(layer_name)
        self.condition, self.input, self.other = condition, input, other

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Where:
        condition = op.input_index("condition", 0)
        if condition is None:
            raise op.error("missing input 'condition'", Status.kParameterMissingUnknown)
        return cls(op.name, condition, Argument.of(op, "input", 1), Argument.of(op, "other", 2))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        a, b = self.input.get(inputs), self.other.get(inputs)
        dtype = result_type(a, b)
        return [np.where(inputs[self.condition], np.asarray(a, dtype=dtype), np.asarray(b, dtype=dtype))]


@register_layer("Tensor.masked_fill", "torch.masked_fill")
class MaskedFill(NonParamLayer):
    """``x.masked_fill(mask, value)``: ``value`` where the (broadcast) mask is True.
    The value is a number or a 0-dim input and takes the dtype of ``x``."""

    def __init__(self, layer_name: str, mask: int, value: Argument):
        super().__init__(layer_name)
        self.mask, self.value = mask, value

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> MaskedFill:
        mask = op.input_index("mask", 1)
        if mask is None:
            raise op.error("missing input 'mask'", Status.kParameterMissingUnknown)
        return cls(op.name, mask, Argument.of(op, "value", 2))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        return [np.where(inputs[self.mask], np.asarray(self.value.get(inputs), dtype=x.dtype), x)]


# -- gathers and scatters --------------------------------------------------------------

def _input(op: RuntimeOperator, name: str, position: int) -> int:
    """Which input is ``$name`` (or unnamed input ``position``); a LayerCreateError if none."""
    index = op.input_index(name, position)
    if index is None or index >= len(op.input_operands_seq):
        raise op.error(f"missing input {name!r}", Status.kParameterMissingUnknown)
    return index


def _axis(dim: int, ndim: int) -> int:
    """``dim`` counted from 0 (negative counts from the end), checked against ``ndim``."""
    if not -max(ndim, 1) <= dim < max(ndim, 1):
        raise InferError(f"dimension {dim} is out of range for an input of {ndim} dimensions",
                         status=InferStatus.kInferFailedDimensionParameterError)
    return dim % max(ndim, 1)


def _checked_index(index: Any, size: int, what: str = "index") -> np.ndarray:
    """An integer index array whose values all lie in ``[0, size)``, as PyTorch requires."""
    index = np.asarray(index)
    if index.dtype.kind not in "iu":
        raise InferError(f"{what} must be an integer tensor, got {index.dtype}",
                         status=InferStatus.kInferFailedDimensionParameterError)
    if index.size and (index.min() < 0 or index.max() >= size):
        bad = index.min() if index.min() < 0 else index.max()
        raise InferError(f"{what} {bad} is out of bounds for a dimension of size {size}",
                         status=InferStatus.kInferFailedDimensionParameterError)
    return index


def _scatter_positions(x: np.ndarray, dim: int, index: np.ndarray, src: Any | None,
                       what: str) -> tuple[tuple[np.ndarray, ...], Any]:
    """Where ``scatter`` writes element ``p`` of ``index``: ``p`` with its ``dim`` coordinate
    replaced by ``index[p]``; and the part of ``src`` that is written (as PyTorch, ``src``
    may be larger than ``index``: its leading corner is used; a number is written everywhere)."""
    if index.ndim != x.ndim:
        raise InferError(f"{what}: index has {index.ndim} dimensions, the input {x.ndim}",
                         status=InferStatus.kInferFailedDimensionParameterError)
    if any(n > x.shape[d] for d, n in enumerate(index.shape) if d != dim):
        raise InferError(f"{what}: index of shape {index.shape} is larger than the input {x.shape} "
                         f"outside dimension {dim}", status=InferStatus.kInferFailedOutputSizeError)
    index = _checked_index(index, x.shape[dim], f"{what} index")
    positions = list(np.indices(index.shape, sparse=True))
    positions[dim] = index
    if isinstance(src, np.ndarray) and src.ndim > 0:
        if src.ndim != index.ndim or any(n > m for n, m in zip(index.shape, src.shape)):
            raise InferError(f"{what}: src of shape {src.shape} is smaller than index {index.shape}",
                             status=InferStatus.kInferFailedOutputSizeError)
        src = src[tuple(slice(0, n) for n in index.shape)]
    return tuple(positions), src


@register_layer("torch.gather")
class Gather(NonParamLayer):
    """``torch.gather(input, dim, index)``: ``out[i][j][k] = input[i][index[i][j][k]][k]``
    for ``dim=1``; the output has the shape of ``index``, which may be smaller than the
    input in the other dimensions."""

    def __init__(self, layer_name: str, dim: int, index: int):
        super().__init__(layer_name)
        self.dim, self.index = dim, index

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Gather:
        return cls(op.name, op.param_int("dim", Status.kParameterMissingDim), _input(op, "index", 1))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, index = inputs[0], np.asarray(inputs[self.index])
        dim = _axis(self.dim, x.ndim)
        if index.ndim != x.ndim or any(n > x.shape[d] for d, n in enumerate(index.shape) if d != dim):
            raise InferError(f"gather: index of shape {index.shape} does not fit the input {x.shape}",
                             status=InferStatus.kInferFailedOutputSizeError)
        index = _checked_index(index, x.shape[dim], "gather index")
        part = x[tuple(slice(None) if d == dim else slice(0, n) for d, n in enumerate(index.shape))]
        return [np.take_along_axis(part, index, axis=dim)]


@register_layer("torch.index_select")
class IndexSelect(NonParamLayer):
    """``torch.index_select(input, dim, index)``: the entries ``index`` (a vector) along ``dim``."""

    def __init__(self, layer_name: str, dim: int, index: int):
        super().__init__(layer_name)
        self.dim, self.index = dim, index

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> IndexSelect:
        layer = cls(op.name, op.param_int("dim", Status.kParameterMissingDim), _input(op, "index", 1))
        layer.batch_independent = keeps_batch(op, layer.dim)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, index = inputs[0], np.asarray(inputs[self.index])
        dim = _axis(self.dim, x.ndim)
        if index.ndim > 1:
            raise InferError(f"index_select: index must be a vector, got shape {index.shape}",
                             status=InferStatus.kInferFailedDimensionParameterError)
        size = x.shape[dim] if x.ndim else 1
        index = _checked_index(index, size, "index_select index").reshape(-1)
        return [np.take(x, index, axis=dim) if x.ndim else np.take(x.reshape(1), index)]


@register_layer("torch.narrow")
class Narrow(NonParamLayer):
    """``torch.narrow(input, dim, start, length)``: ``length`` entries from ``start`` along
    ``dim`` (a view); a negative ``start`` counts from the end."""

    def __init__(self, layer_name: str, dim: int, start: Argument, length: Argument):
        super().__init__(layer_name)
        self.dim, self.start, self.length = dim, start, length

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Narrow:
        start, length = Argument.of(op, "start"), Argument.of(op, "length")
        for name, argument in (("start", start), ("length", length)):
            if argument.index is None and not isinstance(argument.value, int):
                raise op.error(f"parameter {name!r} is {argument.value!r}, expected an integer",
                               Status.kParameterInvalidValue)
        layer = cls(op.name, op.param_int("dim", Status.kParameterMissingDim), start, length)
        layer.batch_independent = keeps_batch(op, layer.dim)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        dim = _axis(self.dim, x.ndim)
        start, length, size = _int(self.start.get(inputs)), _int(self.length.get(inputs)), x.shape[dim]
        if start < 0:
            start += size
        if not 0 <= start <= size or length < 0 or start + length > size:
            raise InferError(f"narrow: start {start} and length {length} do not fit dimension {dim} "
                             f"of size {size}", status=InferStatus.kInferFailedOutputSizeError)
        key = [slice(None)] * x.ndim
        key[dim] = slice(start, start + length)
        return [x[tuple(key)]]


@register_layer("torch.masked_select")
class MaskedSelect(NonParamLayer):
    """``torch.masked_select(input, mask)``: the elements where the (broadcast) mask is
    True, as a vector in row-major order."""

    def __init__(self, layer_name: str, mask: int):
        super().__init__(layer_name)
        self.mask = mask

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> MaskedSelect:
        return cls(op.name, _input(op, "mask", 1))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        mask = np.asarray(inputs[self.mask])
        if mask.dtype != np.bool_:
            raise InferError(f"masked_select: the mask must be bool, got {mask.dtype}",
                             status=InferStatus.kInferFailedDimensionParameterError)
        try:
            x, mask = np.broadcast_arrays(inputs[0], mask)
        except ValueError:
            raise InferError(f"masked_select: mask of shape {mask.shape} does not broadcast with the input "
                             f"{np.shape(inputs[0])}", status=InferStatus.kInferFailedOutputSizeError) from None
        return [x[mask]]


@register_layer("torch.scatter_add", "aten::scatter")
class Scatter(NonParamLayer):
    """``torch.scatter_add(input, dim, index, src)``: a copy of the input with ``src[p]``
    added at ``p`` with its ``dim`` coordinate replaced by ``index[p]`` (repeated
    positions add up). ``torch.scatter`` (and ``Tensor.scatter_``), which pnnx leaves as
    ``aten::scatter(input, dim, index, src)`` with the dim and a number ``src`` made by
    ``pnnx.Expression``, writes instead of adding."""

    def __init__(self, layer_name: str, dim: Argument, index: int, src: int, accumulate: bool):
        super().__init__(layer_name)
        self.dim, self.index, self.src, self.accumulate = dim, index, src, accumulate

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Scatter:
        if op.type == "aten::scatter":
            if len(op.input_operands_seq) != 4:
                raise op.error(f"aten::scatter takes 4 inputs (input, dim, index, src), got "
                               f"{len(op.input_operands_seq)}", Status.kParameterInvalidValue)
            return cls(op.name, Argument(1), 2, 3, accumulate=False)
        dim = Argument(None, op.param_int("dim", Status.kParameterMissingDim))
        return cls(op.name, dim, _input(op, "index", 1), _input(op, "src", 2), accumulate=True)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, index, src = inputs[0], np.asarray(inputs[self.index]), inputs[self.src]
        dim = _axis(_int(self.dim.get(inputs)), x.ndim)
        positions, src = _scatter_positions(x, dim, index, src, "scatter")
        out = x.copy()
        if self.accumulate:
            np.add.at(out, positions, np.asarray(src, dtype=x.dtype))
        else:
            out[positions] = np.asarray(src, dtype=x.dtype)
        return [out]


@register_layer("torch.slice_scatter")
class SliceScatter(NonParamLayer):
    """``torch.slice_scatter(input, src, dim, start, end, step)``: a copy of the input with
    ``out[..., start:end:step, ...] = src`` along ``dim``; ``src`` has exactly that shape."""

    def __init__(self, layer_name: str, src: int, entry: _Index):
        super().__init__(layer_name)
        self.src, self.entry = src, entry

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> SliceScatter:
        step = Argument.of(op, "step", default=1)
        if step == _constant(0):
            raise op.error("slice step cannot be zero", Status.kParameterInvalidValue)
        entry = _Index(op.param_int("dim", Status.kParameterMissingDim, default=0), None,
                       Argument.of(op, "start", default=None), Argument.of(op, "end", default=None), step)
        return cls(op.name, _input(op, "src", 1), entry)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        _axis(self.entry.dim, x.ndim)
        return [_put(x, _index_key(x.ndim, (self.entry,), inputs), inputs[self.src], exact=True)]


@register_layer("aten::select_scatter")
class SelectScatter(NonParamLayer):
    """``torch.select_scatter(input, src, dim, index)``: a copy of the input with
    ``out.select(dim, index) = src``. pnnx has no name of its own for it and writes the
    TorchScript operator, its dim and index made by ``pnnx.Expression``."""

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> SelectScatter:
        if len(op.input_operands_seq) != 4:
            raise op.error(f"aten::select_scatter takes 4 inputs (input, src, dim, index), got "
                           f"{len(op.input_operands_seq)}", Status.kParameterInvalidValue)
        return cls(op.name)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, src = inputs[0], inputs[1]
        dim = _axis(_int(inputs[2]), x.ndim)
        index = _int(inputs[3])
        if not -x.shape[dim] <= index < x.shape[dim]:
            raise InferError(f"select_scatter: index {index} is out of bounds for dimension {dim} of size "
                             f"{x.shape[dim]}", status=InferStatus.kInferFailedDimensionParameterError)
        key = [slice(None)] * x.ndim
        key[dim] = index
        return [_put(x, tuple(key), src, exact=True)]


def _put(x: np.ndarray, key: tuple, values: Any, exact: bool = False) -> np.ndarray:
    """A copy of ``x`` with ``x[key] = values`` (broadcast, unless ``exact``; cast to x's dtype)."""
    out = x.copy()
    values = np.asarray(values)
    try:
        if exact and values.shape != out[key].shape:
            raise ValueError
        out[key] = values.astype(x.dtype, copy=False)
    except (ValueError, IndexError):
        raise InferError(f"cannot write values of shape {values.shape} into {out[key].shape if exact else key} "
                         f"of an input of shape {x.shape}",
                         status=InferStatus.kInferFailedOutputSizeError) from None
    return out


@register_layer("Tensor.slice_copy")
class SliceCopy(NonParamLayer):
    """``y = x.clone(); y[:, 1:3] = src``: a copy of ``$self`` with the slices and selects of
    ``Tensor.slice`` (one dimension or pnnx's fused form) replaced by ``$src`` (broadcast).
    pnnx makes it from an assignment into a slice."""

    def __init__(self, layer_name: str, target: int, src: int, entries: tuple[_Index, ...]):
        super().__init__(layer_name)
        self.target, self.src, self.entries = target, src, entries

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> SliceCopy:
        return cls(op.name, _input(op, "self", 0), _input(op, "src", 1), _slice_entries(op))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[self.target]
        for entry in self.entries:
            _axis(entry.dim, x.ndim)
        return [_put(x, _index_key(x.ndim, self.entries, inputs), inputs[self.src])]


class _IndexList:
    """The index list of ``Tensor.index``/``Tensor.index_put``: an input (a list a
    ``pnnx.Expression`` made) or a constant list written as a parameter."""

    def __init__(self, input: int | None, constant: Any):
        self.input, self.constant = input, constant

    @classmethod
    def of(cls, op: RuntimeOperator, name: str) -> _IndexList:
        index = op.input_index(name, 1)
        if index is not None and index < len(op.input_operands_seq):
            return cls(index, None)
        text = op.param_text(name, Status.kParameterMissingUnknown)
        try:
            constant = compile_expression(text).evaluate([])
        except ExpressionError as exc:
            raise op.error(f"parameter {name!r}: {exc}", Status.kParameterInvalidValue) from exc
        return cls(None, constant)

    def key(self, inputs: Sequence[Any], x: np.ndarray) -> tuple[Any, ...]:
        """The NumPy key: None (a whole dimension) becomes ``:``, lists become int64 arrays."""
        items = self.constant if self.input is None else inputs[self.input]
        if not isinstance(items, (list, tuple)):
            items = [items]
        key = []
        for item in items:
            if item is None:
                key.append(slice(None))
                continue
            array = np.asarray(item)
            if isinstance(item, list) and array.dtype != bool:   # a list of booleans is a mask, as in PyTorch
                array = array.astype(np.int64) if array.size else np.zeros(0, np.int64)
            if array.dtype == np.uint8:     # PyTorch's old byte masks
                array = array.astype(bool)
            if array.dtype.kind not in "iub":
                raise InferError(f"index must be integer or bool tensors, got {array.dtype}",
                                 status=InferStatus.kInferFailedDimensionParameterError)
            key.append(array)
        if sum(k.ndim if isinstance(k, np.ndarray) and k.dtype == bool else 1 for k in key) > x.ndim:
            raise InferError(f"too many indices ({len(key)}) for an input of shape {x.shape}",
                             status=InferStatus.kInferFailedDimensionParameterError)
        return tuple(key)


@register_layer("Tensor.index")
class Index(NonParamLayer):
    """``x[:, idx]``, ``x[idx0, :, idx1]``, ``x[mask]``: advanced indexing with index tensors,
    as NumPy does it (index tensors broadcast together; their dimensions go where the first
    one is, or in front when slices separate them)."""

    def __init__(self, layer_name: str, indices: _IndexList):
        super().__init__(layer_name)
        self.indices = indices

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Index:
        return cls(op.name, _IndexList.of(op, "expr"))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        key = self.indices.key(inputs, x)
        try:
            return [x[key]]
        except IndexError as exc:
            raise InferError(f"index: {exc}", status=InferStatus.kInferFailedDimensionParameterError) from None


@register_layer("Tensor.index_put")
class IndexPut(NonParamLayer):
    """``y = x.clone(); y[idx] = values`` (``accumulate=False``) or ``y[idx] += values`` with
    repeated positions adding up (``accumulate=True``); ``values`` is a number or an input,
    broadcast to the indexed elements."""

    def __init__(self, layer_name: str, indices: _IndexList, values: Argument, accumulate: bool):
        super().__init__(layer_name)
        self.indices, self.values, self.accumulate = indices, values, accumulate

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> IndexPut:
        values = Argument.of(op, "values", 2)
        if values.absent:
            raise op.error("missing 'values'", Status.kParameterMissingUnknown)
        return cls(op.name, _IndexList.of(op, "indices"), values,
                   op.param_bool("accumulate", Status.kParameterInvalidValue, default=False))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        key = self.indices.key(inputs, x)
        values = np.asarray(self.values.get(inputs)).astype(x.dtype, copy=False)
        if not self.accumulate:
            return [_put(x, key, values)]
        # np.add.at adds at repeated positions; it takes integer arrays, so masks become their positions
        key = tuple(part for k in key
                    for part in (np.nonzero(k) if isinstance(k, np.ndarray) and k.dtype == bool else (k,)))
        out = x.copy()
        try:
            np.add.at(out, key, values)
        except (IndexError, ValueError) as exc:
            raise InferError(f"index_put: {exc}", status=InferStatus.kInferFailedOutputSizeError) from None
        return [out]
