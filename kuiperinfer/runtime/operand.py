"""RuntimeOperand: a value flowing between operators (the seeds' RuntimeOperand)."""

from __future__ import annotations

import threading
from typing import Any

from kuiperinfer.runtime.attribute import RuntimeDataType


class RuntimeOperand:
    """A named edge of the graph: produced by one operator, consumed by others.

    ``shapes`` is the shape pnnx recorded at export time (``-1`` for an unknown
    dimension); the real shape is the one of ``data`` during a forward pass, which
    may differ in the batch dimension.

    ``data`` holds the operand's value during a forward pass. It is kept per
    thread, so one built graph can serve several threads at once: each caller
    sees only the values of its own pass.
    """

    __slots__ = ("name", "shapes", "type", "producer", "consumers", "_local")

    def __init__(self, name: str, shapes: list[int], type: RuntimeDataType, producer: str):
        self.name = name
        self.shapes = shapes
        self.type = type
        self.producer = producer
        self.consumers: list[str] = []
        self._local = threading.local()

    @property
    def data(self) -> Any:
        """This thread's value of the operand (None before it is produced or after release)."""
        return getattr(self._local, "value", None)

    @data.setter
    def data(self, value: Any) -> None:
        self._local.value = value

    def __repr__(self) -> str:
        return f"RuntimeOperand({self.name!r}, shapes={self.shapes}, producer={self.producer!r})"
