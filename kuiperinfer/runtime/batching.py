"""Batching: whether a graph's samples are independent along dimension 0, and at which
batch sizes it runs. Computed once, when the graph is built.

A graph is *batch-independent* when sample ``i`` of every output depends only on sample
``i`` of the inputs. Only then may a batch be cut into chunks that run separately (the
runner's threads), may separate requests be joined into one batch (the server), and may a
dataset's rows be stacked in any grouping (Ray). The answer comes from one walk over the
execution plan, as torch.fx's shape propagation walks a graph, giving each value one of
three roles (:class:`Batch`):

- the graph inputs are ``ROWS``: dimension 0 is the batch;
- constants, and values computed from constants alone, are ``SHARED``: every sample
  sees them whole;
- a layer reading ``ROWS`` says what it makes of them (:meth:`Layer.batch_flow
  <kuiperinfer.layers.base.Layer.batch_flow>`): ``ROWS`` again when it keeps the
  samples apart, ``SIZE`` for a Python value holding the batch size (``x.size(0)``, a
  shape ``[size(@0,0),-1]``), or None when its outputs mix samples (a softmax over
  dimension 0, a mean over the batch, a reshape that moves the batch).

A ``SHARED`` value that such a layer reads as part of the batch (not as a weight, see
:attr:`Layer.whole_inputs <kuiperinfer.layers.base.Layer.whole_inputs>`) must broadcast
against it: fewer dimensions, or a dimension 0 of 1. A constant whose dimension 0 is the
batch pnnx traced (``cls_token.expand(x.shape[0], -1, -1)`` traced at batch 8 is folded
into a constant of shape ``(8, 1, C)``) *carries the batch* (:class:`Carrier`): if all its
rows are equal it is re-expanded to the batch of each call, so the graph runs at any
batch as the PyTorch module does; otherwise the graph runs only at the traced batch, and
a chunk of it reads the chunk's rows.

The graph is batch-independent when no layer mixes samples, every graph input has a
batch dimension, and every graph output is ``ROWS``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from kuiperinfer.pnnx.ir import shape_text


class Batch(Enum):
    """What a value of a graph is to the batch."""

    SHARED = "shared"
    """The same for every sample: a constant, or computed from constants alone."""
    ROWS = "rows"
    """An array (or a tuple of arrays) whose dimension 0 is the batch: row ``i`` belongs
    to sample ``i``."""
    SIZE = "size"
    """A Python value holding the batch size: the size itself, or a shape it starts."""


@dataclass(frozen=True)
class Carrier:
    """A constant read as part of the batch whose dimension 0 is the traced batch."""

    step: int
    """The step of the plan whose operator reads it."""
    position: int
    """Which input of that operator it is."""
    name: str
    """The operand's name."""
    shape: tuple[int, ...]
    """Its shape, as pnnx recorded it."""
    equal_rows: bool
    """Whether all its rows are equal: it then follows the batch of each call."""

    def fit(self, value: Any, rows: slice) -> Any:
        """The constant for the samples ``rows`` of a call."""
        count = rows.stop - rows.start
        if not isinstance(value, np.ndarray) or value.ndim == 0:
            return value
        if self.equal_rows:
            if value.shape[0] == count:
                return value
            return np.broadcast_to(value[:1], (count, *value.shape[1:]))
        if rows.start == 0 and rows.stop == value.shape[0]:
            return value
        return value[rows]


@dataclass(frozen=True)
class Batching:
    """The analysis of one graph: see the module's docstring."""

    independent: bool
    """Sample ``i`` of every output depends only on sample ``i`` of the inputs: a batch may
    be cut into chunks, and separate requests joined into one batch."""
    reason: str = ""
    """Why the samples are not independent (which operator, input or output), if not."""
    batch: int | None = None
    """The one batch size the graph runs at, or None for any."""
    fixed_by: str = ""
    """Which operator and constant fix the batch, if one does."""
    carriers: tuple[Carrier, ...] = field(default=())
    """The constants that carry the traced batch, by the step that reads them."""

    def accepts(self, batch: int) -> bool:
        """Whether the graph runs at ``batch`` samples."""
        return self.batch is None or batch == self.batch

    def describe(self) -> str:
        """One line for a user: which batch sizes run, and whether samples stay apart."""
        sizes = "any batch size" if self.batch is None else f"only batch {self.batch} ({self.fixed_by})"
        samples = "samples independent" if self.independent else f"samples not independent: {self.reason}"
        return f"{sizes}; {samples}"


def sequence_flow(items: Sequence[Batch]) -> Batch | None:
    """What a tuple or list of values is to the batch: ``ROWS`` when every item is (a
    model's several outputs), ``SIZE`` for a shape that starts with the batch size and
    ``SHARED`` for shared items; None otherwise (chunks would repeat a shared item)."""
    if items and all(item is Batch.ROWS for item in items):
        return Batch.ROWS
    if all(item is Batch.SHARED for item in items[1:]) and items[:1] != [Batch.ROWS]:
        return items[0] if items else Batch.SHARED
    return None


def analyse(inputs: Sequence[Any], plan: Sequence[Any], outputs: Sequence[Any],
            constant_value: Callable[[Any], Any]) -> Batching:
    """The batching of a built graph: its input operands, its plan of operators (with
    layers) in execution order, its output operands, and a function that computes the
    value of a ``SHARED`` operand (to see whether a carrier's rows are equal)."""
    walk = _Walk(inputs)
    for step, op in enumerate(plan):
        walk.visit(step, op)
    for operand in outputs:
        role = walk.roles.get(id(operand))
        if role is not Batch.ROWS and not walk.reason:
            walk.reason = (f"output {operand.name!r} " +
                           ("is the same for every sample" if role is Batch.SHARED else
                            "is the batch size" if role is Batch.SIZE else "mixes samples"))
    carriers = []
    for pending in walk.carriers:
        carrier = _carrier(pending, constant_value)
        if carrier is None:   # left as it is: the operator broadcasts it or says why not
            op = plan[pending.step]
            walk.reason = walk.reason or (f"operator {op.name!r} ({op.type}) reads {pending.operand.name!r}, "
                                          f"whose value cannot be computed before a run")
        else:
            carriers.append(carrier)
    fixed = next((c for c in carriers if not c.equal_rows), None)
    fixed_by = ""
    if fixed is not None:
        op = plan[fixed.step]
        fixed_by = (f"operator {op.name!r} ({op.type}) reads the constant {fixed.name!r} of shape "
                    f"{shape_text(fixed.shape)}, one row per sample of the batch pnnx traced, and its rows differ")
    return Batching(not walk.reason, walk.reason, None if fixed is None else walk.traced,
                    fixed_by, tuple(carriers))


@dataclass
class _Pending:
    step: int
    position: int
    operand: Any


class _Walk:
    """Roles of the operands, propagated through the plan (``roles[id(operand)]``: a
    :class:`Batch`, or None for a value that mixes samples)."""

    def __init__(self, inputs: Sequence[Any]):
        self.roles: dict[int, Batch | None] = {}
        self.reason = ""
        self.carriers: list[_Pending] = []
        declared = {o.shapes[0] for o in inputs if o.shapes and o.shapes[0] > 0}
        self.traced = next(iter(declared)) if len(declared) == 1 else None
        """The batch size pnnx traced the inputs at, if they agree on one."""
        if len(declared) > 1:
            self.reason = f"the inputs were traced at different batch sizes {sorted(declared)}"
        for operand in inputs:
            self.roles[id(operand)] = Batch.ROWS

    def visit(self, step: int, op: Any) -> None:
        operands = op.input_operands_seq
        roles = [self.roles.get(id(o), Batch.SHARED) for o in operands]
        if any(role is None for role in roles):
            self._set(op, None)
        elif all(role is Batch.SHARED for role in roles):
            self._set(op, Batch.SHARED)
        else:
            flow = op.layer.batch_flow(roles)
            if flow is None:
                self._mixed(op, "does not keep the samples apart along dimension 0")
            elif flow is Batch.ROWS and not self._fits_batch(step, op, roles):
                self._set(op, None)
            else:
                self._set(op, flow)

    def _fits_batch(self, step: int, op: Any, roles: Sequence[Batch]) -> bool:
        """Whether every input the layer reads as part of the batch is batched or broadcasts
        against it, and every input it reads whole is shared; notes the carriers."""
        operands = op.input_operands_seq
        whole = op.layer.whole_inputs
        rank = max((len(o.shapes) for o, r in zip(operands, roles) if r is Batch.ROWS), default=0)
        for position, (operand, role) in enumerate(zip(operands, roles)):
            if position in whole:
                if role is not Batch.SHARED:
                    self._mixed(op, f"reads the batched {operand.name!r} whole for every sample")
                    return False
                continue
            shape = operand.shapes
            if role is not Batch.SHARED or rank == 0 or len(shape) < rank or \
                    (len(shape) == rank and shape[0] == 1 and self.traced != 1):
                continue
            if len(shape) == rank and self.traced is not None and shape[0] == self.traced:
                self.carriers.append(_Pending(step, position, operand))
                continue
            self._mixed(op, f"reads {operand.name!r} of shape {shape_text(shape)} beside a batch of "
                            f"{rank} dimensions, which it does not broadcast against")
            return False
        return True

    def _mixed(self, op: Any, what: str) -> None:
        self.reason = self.reason or f"operator {op.name!r} ({op.type}) {what}"
        self._set(op, None)

    def _set(self, op: Any, role: Batch | None) -> None:
        for operand in op.output_operands:
            self.roles[id(operand)] = role


def _carrier(pending: _Pending, constant_value: Callable[[Any], Any]) -> Carrier | None:
    """The carrier, or None when the constant's value cannot be computed (or is no array)."""
    operand = pending.operand
    try:
        value = constant_value(operand)
    except Exception:  # noqa: BLE001  (whatever stops it, the run will meet it and say what)
        return None
    if not isinstance(value, np.ndarray) or value.ndim == 0 or value.shape[0] == 0:
        return None
    equal = bool(np.array_equal(value, np.broadcast_to(value[:1], value.shape), equal_nan=value.dtype.kind in "fc"))
    return Carrier(pending.step, pending.position, operand.name, tuple(operand.shapes), equal)

