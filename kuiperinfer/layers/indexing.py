"""Indexing: slices and selects (views of the input), where and masked_fill.

pnnx turns Python indexing into ``Tensor.slice`` and ``Tensor.select``. A chain of
them over increasing dimensions is fused into one multi-dimension slice: ``x[:, 1:3, 0]``
becomes ``dims=(1,2) starts=(1,0) ends=(3,0) steps=(1,0) selects=(2147483647,0)``.
Each ``dims`` entry is a position in that one index expression, i.e. a dimension of
the *input*; ``selects`` holds an integer index, or INT_MAX where the entry is a range.
An end of INT_MAX means "to the end". Python's slice clamps out-of-range bounds exactly
as PyTorch does, so the bounds are used as written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.expression.promotion import result_type
from kuiperinfer.layers.base import NonParamLayer, keeps_batch
from kuiperinfer.layers.comparison import Argument
from kuiperinfer.runtime.operator import RuntimeOperator
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


def _index_view(x: np.ndarray, entries: Sequence[_Index], inputs: Sequence[Any]) -> np.ndarray:
    """``x[...]`` with each entry at its input dimension (negative dims count from the end)."""
    index: list[int | slice] = [slice(None)] * x.ndim
    for entry in entries:
        index[entry.dim % x.ndim] = entry.resolve(inputs)
    return x[tuple(index)]


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


@register_layer("Tensor.slice")
class Slice(_IndexLayer):
    """``x[start:end:step]`` along ``dim`` (bounds may be inputs ``$start``/``$end``/``$step``),
    or pnnx's fused multi-dimension form with ``dims``/``starts``/``ends``/``steps``/``selects``."""

    @classmethod
    def create(cls, op: RuntimeOperator) -> Slice:
        if op.has_param("dims"):
            return cls.of(op, cls._fused_entries(op))
        dim = op.param_int("dim", Status.kParameterMissingDim)
        step = Argument.of(op, "step", default=1)
        if step == _constant(0):
            raise op.error("slice step cannot be zero", Status.kParameterInvalidValue)
        entry = _Index(dim, None, Argument.of(op, "start", default=0), Argument.of(op, "end", default=INT_MAX),
                       step)
        return cls.of(op, (entry,))

    @staticmethod
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


@register_layer("Tensor.select", "torch.select")
class Select(_IndexLayer):
    """``x.select(dim, index)``: one index along ``dim`` (negative counts from the end);
    the index may be an input ``$index``."""

    @classmethod
    def create(cls, op: RuntimeOperator) -> Select:
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
    def create(cls, op: RuntimeOperator) -> Where:
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
    def create(cls, op: RuntimeOperator) -> MaskedFill:
        mask = op.input_index("mask", 1)
        if mask is None:
            raise op.error("missing input 'mask'", Status.kParameterMissingUnknown)
        return cls(op.name, mask, Argument.of(op, "value", 2))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        return [np.where(inputs[self.mask], np.asarray(self.value.get(inputs), dtype=x.dtype), x)]
