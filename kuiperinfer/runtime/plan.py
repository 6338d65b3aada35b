"""The run plan: the built graph's operators as steps over numbered slots, bound once.

:meth:`RuntimeGraph.build <kuiperinfer.runtime.graph.RuntimeGraph.build>` turns the
topological order into a :class:`RunPlan`: every operand gets a slot number, and every step
holds its operator, the slots it reads and writes and the slots no later step reads. A run
is then a loop over those steps on a list of values, each operator's layer's ``forward``
called directly (torch.fx's Interpreter loop; tinygrad's
TinyJit replays its captured kernels the same way): no dictionary of operands, no frame of
the engine's own around an operator, each value dropped after its last reader.

A graph whose ``run_node`` is overridden (a profiler, a tracer), a run that fetches values
from inside the graph, and a graph with constants that carry the traced batch (which each
run fits to its samples) go through :meth:`RunPlan.run_hooked` instead, which calls
``run_node`` for every step and keeps the values asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kuiperinfer.errors import InferError, InferStatus, KuiperError, OperatorError
from kuiperinfer.pnnx.ir import shape_text
from kuiperinfer.runtime.batching import Carrier
from kuiperinfer.runtime.operand import RuntimeOperand
from kuiperinfer.runtime.operator import RuntimeOperator

RunNode = Callable[[RuntimeOperator, list[Any]], list[Any]]
"""How a hooked run computes a step: the graph's ``run_node``."""


@dataclass(frozen=True)
class Step:
    """One operator of the plan: what it reads and writes, and what is dropped after it."""

    op: RuntimeOperator
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    frees: tuple[int, ...]
    """Slots no later step reads (the graph's outputs are never among them)."""
    fits: tuple[Carrier, ...]
    """Constants it reads that carry the traced batch, fitted to each run's samples."""


class RunPlan:
    """The steps of a built graph, in topological order, over :attr:`slots` numbered values."""

    def __init__(self, order: Sequence[RuntimeOperator], inputs: Sequence[RuntimeOperand],
                 outputs: Sequence[RuntimeOperand], carriers: Sequence[Carrier] = ()):
        numbers: dict[int, int] = {}

        def slot(operand: RuntimeOperand) -> int:
            return numbers.setdefault(id(operand), len(numbers))

        self.input_slots = tuple(slot(o) for o in inputs)
        for op in order:
            for operand in (*op.input_operands_seq, *op.output_operands):
                slot(operand)
        self.output_slots = tuple(slot(o) for o in outputs)
        self.slots = len(numbers)
        last_read: dict[int, int] = {}
        for index, op in enumerate(order):
            for operand in op.input_operands_seq:
                last_read[slot(operand)] = index
        kept = set(self.output_slots) | set(self.input_slots)
        frees: list[list[int]] = [[] for _ in order]
        for number, index in last_read.items():
            if number not in kept:
                frees[index].append(number)
        fits: list[list[Carrier]] = [[] for _ in order]
        for carrier in carriers:
            fits[carrier.step].append(carrier)
        self.steps = tuple(Step(op, tuple(slot(o) for o in op.input_operands_seq),
                                tuple(slot(o) for o in op.output_operands), tuple(sorted(frees[i])), tuple(fits[i]))
                           for i, op in enumerate(order))
        self.fitted = bool(carriers)
        """Whether some step fits a constant to each run's samples (then every run is hooked)."""
        self._slot_of = numbers

    def slot_of(self, operand: RuntimeOperand) -> int:
        """The slot holding ``operand``'s value."""
        return self._slot_of[id(operand)]

    def run(self, values: Sequence[Any]) -> list[Any]:
        """The graph's outputs from its inputs' ``values``, each layer's ``forward`` called directly."""
        slots: list[Any] = [None] * self.slots
        for number, value in zip(self.input_slots, values):
            slots[number] = value
        step = self.steps[0] if self.steps else None
        try:
            for step in self.steps:
                results = step.op.layer.forward([slots[i] for i in step.inputs])
                if len(results) != len(step.outputs):
                    raise _output_count(step.op, len(results))
                for number, value in zip(step.outputs, results):
                    slots[number] = value
                for number in step.frees:
                    slots[number] = None
        except Exception as error:
            told = failure(step.op, error, [slots[i] for i in step.inputs])
            if told is error:
                raise
            raise told from error
        return [slots[i] for i in self.output_slots]

    def run_hooked(self, values: Sequence[Any], wanted: Sequence[int], rows: slice, run_node: RunNode) -> list[Any]:
        """The values of the slots ``wanted`` from the inputs' ``values`` (the samples ``rows``
        of the call), every step through ``run_node``; a wanted value is kept past its last reader."""
        slots: list[Any] = [None] * self.slots
        for number, value in zip(self.input_slots, values):
            slots[number] = value
        keep = set(wanted)
        for step in self.steps:
            inputs = [slots[i] for i in step.inputs]
            for carrier in step.fits:   # a constant that carries the traced batch, fitted to these samples
                inputs[carrier.position] = carrier.fit(inputs[carrier.position], rows)
            results = run_node(step.op, inputs)
            if len(results) != len(step.outputs):
                raise _output_count(step.op, len(results))
            for number, value in zip(step.outputs, results):
                slots[number] = value
            for number in step.frees:
                if number not in keep:
                    slots[number] = None
        return [slots[i] for i in wanted]


def failure(op: RuntimeOperator, error: BaseException, inputs: Sequence[Any]) -> KuiperError:
    """What ``error``, raised computing ``op`` on ``inputs``, tells the user: an InferError
    naming the operator (an error that names one already is returned as it is)."""
    if isinstance(error, OperatorError):
        if error.op_name is None:
            return InferError(error.reason, op.name, op.type, error.status)
        return error
    if isinstance(error, KuiperError):   # e.g. an ExpressionError: say which operator it came from
        return InferError(str(error), op.name, op.type)
    shapes = ", ".join(_value_text(value) for value in inputs)
    return InferError(f"{type(error).__name__}: {error} (input shapes: {shapes})", op.name, op.type)


def _value_text(value: Any) -> str:
    """An input as an error message shows it: an array's shape, a list's shapes, a scalar's type."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value_text(item) for item in value) + "]"
    if isinstance(value, np.ndarray):
        return shape_text(value.shape)
    return type(value).__name__


def _output_count(op: RuntimeOperator, made: int) -> InferError:
    return InferError(f"layer produced {made} outputs, the graph expects {len(op.output_operands)}",
                      op.name, op.type, InferStatus.kInferFailedOutputSizeError)
