"""RuntimeOperator: a node of the runtime graph (KuiperInfer's RuntimeOperator).

It ties together what pnnx recorded about one operator (type, name, parameters,
weights, input and output operands) with the layer that computes it. Layers read their
parameters through the typed accessors below, which turn a missing or ill-typed
parameter into a :class:`LayerCreateError` carrying KuiperInfer's :class:`ParseParameterAttrStatus`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kuiperinfer.errors import LayerCreateError, ParseParameterAttrStatus, WeightError
from kuiperinfer.runtime.attribute import RuntimeAttribute
from kuiperinfer.runtime.operand import RuntimeOperand
from kuiperinfer.runtime.parameter import RuntimeParameter
from kuiperinfer.runtime.parameter import RuntimeParameterType as T

Status = ParseParameterAttrStatus
_MISSING = object()
# pnnx writes non-finite floats as words (``min=-inf``, ``value=nan.0``) that its reader keeps as strings.
_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan, "-nan": math.nan}


def _non_finite(value: Any) -> float | None:
    if isinstance(value, str):
        return _NON_FINITE.get(value[:-2] if value.endswith(".0") else value)
    return None


class RuntimeOperator:
    """One computation node: its layer, operands, parameters and weights.

    Its operands are edited only through :mod:`kuiperinfer.optimizer.rewrite`, which keeps
    the graph's invariants (:meth:`RuntimeGraph.check <kuiperinfer.runtime.graph.RuntimeGraph.check>`).
    """

    def __init__(self, name: str, type: str, line: int | None = None):
        self.name = name
        self.type = type
        self.line = line
        """Line of the .param file the operator was read from (for messages)."""
        self.layer: Any = None
        """The layer computing it (made by :meth:`RuntimeGraph.build`); pnnx.Input and
        pnnx.Output have none."""
        self.input_operands_seq: list[RuntimeOperand] = []
        """Input operands in the order the layer receives them."""
        self.input_names: list[str] = []
        """pnnx's ``$name`` of each input ("" where unnamed), aligned with input_operands_seq."""
        self.output_operands: list[RuntimeOperand] = []
        self.params: dict[str, RuntimeParameter] = {}
        self.attribute: dict[str, RuntimeAttribute] = {}
        self.plan: Any = None
        """The graph optimiser's plan for this operator: what it fused in and which forms it
        chose (a frozen dataclass its layer defines); None for an operator as pnnx wrote it."""

    @property
    def output_operators(self) -> list[RuntimeOperator]:
        """The operators reading this operator's outputs, each once, in order."""
        readers = [op for operand in self.output_operands for op in operand.consumers]
        return list({id(op): op for op in readers}.values())

    def __repr__(self) -> str:
        return f"RuntimeOperator({self.name!r}, {self.type!r})"

    # -- parameters ----------------------------------------------------------------

    def error(self, message: str, status: Status = Status.kParameterMissingUnknown) -> LayerCreateError:
        """A LayerCreateError naming this operator."""
        return LayerCreateError(message, self.name, self.type, status)

    def has_param(self, key: str) -> bool:
        return key in self.params and self.params[key].type != T.kParameterUnknown

    def _param(self, key: str, types: tuple[T, ...], status: Status, default: Any) -> Any:
        parameter = self.params.get(key)
        if parameter is None or parameter.type == T.kParameterUnknown:
            if default is not _MISSING:
                return default
            raise self.error(f"missing parameter {key!r}", status)
        if parameter.type not in types:
            expected = " or ".join(t.name for t in types)
            raise self.error(
                f"parameter {key!r} is {parameter.type.name} ({parameter.value!r}), expected {expected}",
                status,
            )
        return parameter.value

    def param_bool(self, key: str, status: Status = Status.kParameterMissingUnknown,
                   default: Any = _MISSING) -> bool:
        return bool(self._param(key, (T.kParameterBool,), status, default))

    def param_int(self, key: str, status: Status = Status.kParameterMissingUnknown,
                  default: Any = _MISSING) -> int:
        value = self._param(key, (T.kParameterInt, T.kParameterBool), status, default)
        return value if value is default else int(value)

    def param_float(self, key: str, status: Status = Status.kParameterMissingUnknown,
                    default: Any = _MISSING) -> float:
        """A float parameter; ints and the words inf/-inf/nan are accepted."""
        word = _non_finite(self.param_value(key))
        if word is not None:
            return word
        value = self._param(key, (T.kParameterFloat, T.kParameterInt), status, default)
        return value if value is default else float(value)

    def param_number(self, key: str, default: Any = _MISSING) -> bool | int | float | None:
        """A scalar parameter as a Python number (bool, int, float, inf/nan words); None stays None."""
        if key not in self.params:
            if default is _MISSING:
                raise self.error(f"missing parameter {key!r}", Status.kParameterMissingUnknown)
            return default
        value = self.param_value(key)
        word = _non_finite(value)
        if word is not None:
            return word
        if value is not None and (isinstance(value, str) or not isinstance(value, (bool, int, float))):
            raise self.error(f"parameter {key!r} is {value!r}, expected a number", Status.kParameterInvalidValue)
        return value

    def param_text(self, key: str, status: Status = Status.kParameterMissingUnknown) -> str:
        """A parameter exactly as written in the .param file (``expr=[size(@0,0),-1]``)."""
        parameter = self.params.get(key)
        if parameter is None:
            raise self.error(f"missing parameter {key!r}", status)
        return parameter.text

    def param_str(self, key: str, status: Status = Status.kParameterMissingUnknown,
                  default: Any = _MISSING) -> str:
        return self._param(key, (T.kParameterString,), status, default)

    def param_ints(self, key: str, length: int | None = None,
                   status: Status = Status.kParameterMissingUnknown,
                   default: Any = _MISSING) -> tuple[int, ...]:
        """An int array parameter; a single int is broadcast to ``length`` (as PyTorch's _pair)."""
        value = self._param(key, (T.kParameterIntArray, T.kParameterInt), status, default)
        if value is default:
            return value
        values = (int(value),) * (length or 1) if isinstance(value, int) else tuple(value)
        if length is not None:
            if len(values) == 1 and length > 1:
                values = values * length
            if len(values) != length:
                raise self.error(f"parameter {key!r} has {len(values)} values {values}, expected {length}",
                                 status)
        return values

    def param_floats(self, key: str, status: Status = Status.kParameterMissingUnknown,
                     default: Any = _MISSING) -> tuple[float, ...]:
        value = self._param(key, (T.kParameterFloatArray, T.kParameterIntArray,
                                  T.kParameterFloat, T.kParameterInt), status, default)
        if value is default:
            return value
        return (float(value),) if isinstance(value, (int, float)) else tuple(float(v) for v in value)

    def param_value(self, key: str, default: Any = None) -> Any:
        """The raw Python value of a parameter, or ``default`` when absent or None."""
        parameter = self.params.get(key)
        return default if parameter is None or parameter.type == T.kParameterUnknown else parameter.value

    def input_index(self, name: str, position: int | None = None) -> int | None:
        """Which input pnnx named ``name`` (``$name=operand``); None when there is none.

        Operators whose inputs carry no names (pnnx leaves them out on some rewrites)
        fall back to ``position``.
        """
        if name in self.input_names:
            return self.input_names.index(name)
        if not any(self.input_names) and position is not None and position < len(self.input_operands_seq):
            return position
        return None

    # -- weights -------------------------------------------------------------------

    def weight(self, key: str, shape: Sequence[int] | None = None,
               status: Status = Status.kAttrMissingWeight, dtype: Any = np.float32,
               copy: bool = True) -> np.ndarray:
        """Decode weight attribute ``key`` (checking its shape when given) to a new array;
        ``copy=False`` for a read-only one, the stored values themselves where they can be
        (:meth:`RuntimeAttribute.get`)."""
        attribute = self.attribute.get(key)
        if attribute is None:
            raise WeightError(f"missing weight attribute {key!r}", self.name, self.type, status)
        if shape is not None and tuple(attribute.shape) != tuple(shape):
            raise WeightError(
                f"weight attribute {key!r} has shape {tuple(attribute.shape)}, expected {tuple(shape)}",
                self.name, self.type, Status.kAttrWrongSize,
            )
        return attribute.get(dtype, copy)

    def has_weight(self, key: str) -> bool:
        return key in self.attribute
