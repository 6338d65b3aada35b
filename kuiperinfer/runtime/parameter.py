"""RuntimeParameter: an operator's typed parameter (KuiperInfer's RuntimeParameter family).

pnnx stores parameters as text (``stride=(1,1)``); the PNNX reader turns each into a
typed :class:`kuiperinfer.pnnx.ir.Parameter`. Here we carry it into the runtime
with KuiperInfer's type tags, so layers can ask for "an int array called stride" and get
a clear error when the model says something else.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from kuiperinfer.pnnx.ir import Parameter
from kuiperinfer.pnnx.param_file import parameter_text


class RuntimeParameterType(IntEnum):
    """KuiperInfer's parameter type tags; the numbers are pnnx's ``Parameter::type`` codes."""

    kParameterUnknown = 0
    kParameterBool = 1
    kParameterInt = 2
    kParameterFloat = 3
    kParameterString = 4
    kParameterIntArray = 5
    kParameterFloatArray = 6
    kParameterStringArray = 7
    kParameterComplex = 10
    kParameterComplexArray = 11


@dataclass(frozen=True)
class RuntimeParameter:
    """One parameter of a :class:`RuntimeOperator`: a type tag and a Python value.

    ``kParameterUnknown`` is pnnx's ``None`` (for example ``stride=None`` in F.max_pool2d).
    """

    type: RuntimeParameterType
    value: Any
    text: str
    """The parameter as written in the .param file."""

    @classmethod
    def from_pnnx(cls, parameter: Parameter) -> RuntimeParameter:
        """Convert a :class:`kuiperinfer.pnnx.ir.Parameter`."""
        value = parameter.value
        if isinstance(value, list):
            value = tuple(value)
        return cls(RuntimeParameterType(parameter.type), value, parameter_text(parameter))
