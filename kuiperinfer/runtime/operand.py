"""RuntimeOperand: a value flowing between operators (KuiperInfer's RuntimeOperand)."""

from __future__ import annotations

from typing import Any

from kuiperinfer.runtime.attribute import RuntimeDataType


class RuntimeOperand:
    """A named edge of the graph: produced by one operator, read by others.

    ``shapes`` is the shape pnnx recorded at export time (``-1`` for an unknown
    dimension); a run's value may differ in the batch dimension. The operand holds no
    value: a run keeps its values in an environment of its own (see
    :meth:`RuntimeGraph.run <kuiperinfer.runtime.graph.RuntimeGraph.run>`), so one
    graph serves many threads.

    ``producer`` and ``consumers`` are
    :class:`~kuiperinfer.runtime.operator.RuntimeOperator` objects, which hold their operands
    in turn; the operand is the lower of the two and does not import the operator.
    """

    __slots__ = ("name", "shapes", "type", "producer", "consumers")

    def __init__(self, name: str, shapes: list[int], type: RuntimeDataType, producer: Any = None):
        self.name = name
        self.shapes = shapes
        self.type = type
        self.producer = producer
        """The operator that writes it (None until the graph sets it)."""
        self.consumers: list[Any] = []
        """The operators that read it, once per input slot they read it in."""

    def __repr__(self) -> str:
        producer = self.producer.name if self.producer is not None else None
        return f"RuntimeOperand({self.name!r}, shapes={self.shapes}, producer={producer!r})"
