"""Will kuiperinfer run this model? Every operator's layer is created, and every failure kept.

:func:`check_support` reads the model and asks the :class:`LayerRegisterer` for the
layer of each operator, as building the graph would, but carries on past failures:
the report lists every operator type that has no layer (with the closest registered
types) and every operator whose parameters or weights its layer refuses, with the
reason. Nothing is run.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

from kuiperinfer.errors import KuiperError, LayerCreateError, UnknownOperatorError
from kuiperinfer.pnnx.ir import INPUT_TYPE, OUTPUT_TYPE
from kuiperinfer.runtime.graph import RuntimeGraph
from kuiperinfer.runtime.registry import LayerRegisterer


@dataclass(frozen=True)
class UnsupportedType:
    """An operator type with no registered layer, and the operators of that type."""

    type: str
    operators: tuple[str, ...]
    suggestions: tuple[str, ...]
    """The closest registered types."""


@dataclass(frozen=True)
class OperatorProblem:
    """An operator whose layer could not be created."""

    name: str
    type: str
    line: int | None
    reason: str
    status: str | None
    """KuiperInfer's status code name (``kParameterInvalidValue``, ...) when there is one."""


@dataclass(frozen=True)
class SupportReport:
    """What :func:`check_support` found; ``runnable`` when nothing is in the way."""

    path: str
    operators: int
    """Operators checked (all but pnnx.Input and pnnx.Output)."""
    unsupported_types: tuple[UnsupportedType, ...]
    problems: tuple[OperatorProblem, ...]

    @property
    def runnable(self) -> bool:
        return not self.unsupported_types and not self.problems

    @property
    def failing_operators(self) -> int:
        return sum(len(t.operators) for t in self.unsupported_types) + len(self.problems)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return {"model": self.path, "runnable": self.runnable, "operators": self.operators,
                "unsupported_types": [asdict(t) for t in self.unsupported_types],
                "problems": [asdict(p) for p in self.problems]}


def check_support(model: str | os.PathLike | RuntimeGraph) -> SupportReport:
    """Try to create the layer of every operator of ``model`` (a .pnnx.param or a graph).

    Raises :class:`~kuiperinfer.errors.ModelFormatError` when the files cannot be read.
    """
    graph = model if isinstance(model, RuntimeGraph) else RuntimeGraph(model)
    if not graph.operators:
        graph.init()
    unknown: dict[str, list[str]] = {}
    suggestions: dict[str, tuple[str, ...]] = {}
    problems: list[OperatorProblem] = []
    checked = [op for op in graph.operators if op.type not in (INPUT_TYPE, OUTPUT_TYPE)]
    for op in checked:
        try:
            LayerRegisterer.create_layer(op)
        except UnknownOperatorError as exc:
            unknown.setdefault(op.type, []).append(op.name)
            suggestions[op.type] = tuple(exc.suggestions)
        except LayerCreateError as exc:
            problems.append(OperatorProblem(op.name, op.type, op.line, exc.reason, exc.status.name))
        except KuiperError as exc:  # an expression that does not parse, and the like
            problems.append(OperatorProblem(op.name, op.type, op.line, str(exc), None))
    unsupported = tuple(UnsupportedType(t, tuple(names), suggestions[t]) for t, names in unknown.items())
    return SupportReport(graph.param_path or "<graph>", len(checked), unsupported, tuple(problems))
