"""One exception hierarchy for everything kuiperinfer reports.

Every error raised from our code is a :class:`KuiperError`. The subclasses say
*where* things went wrong (the model files, building a layer, running the graph)
and carry KuiperInfer's status codes (:class:`InferStatus`,
:class:`ParseParameterAttrStatus`) so that readers of KuiperInfer recognise them.

    KuiperError
    ├── ModelFormatError          a .param/.bin pair that cannot be read
    │   ├── ParamSyntaxError      malformed .param text (file and line)
    │   ├── CalibrationError      a calibration table that cannot be read or does not fit the model
    │   └── BinArchiveError       malformed or inconsistent .pnnx.bin archive
    ├── ExpressionError           a pnnx.Expression that cannot be parsed or evaluated
    ├── OptionError               a load option out of range, or options that contradict each other
    ├── GraphError                graph structure or state problems (cycles, wrong state)
    ├── OperatorError             about one operator: its name, type and a status code
    │   ├── LayerCreateError      building a layer from its operator failed
    │   │   ├── UnknownOperatorError  no layer is registered for the operator type
    │   │   └── WeightError       a missing or wrong-sized weight attribute
    │   └── InferError            running the graph failed
    │       └── InputError        a wrong input: name, expected and actual shape
    ├── RegistryError             registering a layer type twice, and the like
    ├── ConversionError           an ONNX or TorchScript file that pnnx could not convert
    └── TensorError               misuse of the Tensor API
"""

from __future__ import annotations

from enum import IntEnum


class InferStatus(IntEnum):
    """Status of a layer's forward pass (KuiperInfer's ``InferStatus``)."""

    kInferUnknown = -1
    kInferSuccess = 0
    kInferFailedInputEmpty = 1
    kInferFailedWeightParameterError = 2
    kInferFailedBiasParameterError = 3
    kInferFailedStrideParameterError = 4
    kInferFailedDimensionParameterError = 5
    kInferFailedChannelParameterError = 6
    kInferFailedOutputSizeError = 7
    kInferFailedOperationUnknown = 8
    kInferFailedYoloStageNumberError = 9


class ParseParameterAttrStatus(IntEnum):
    """Status of reading an operator's parameters and attributes (KuiperInfer's codes)."""

    kParameterMissingUnknown = -1
    kParameterAttrParseSuccess = 0
    kParameterMissingStride = 1
    kParameterMissingPadding = 2
    kParameterMissingKernel = 3
    kParameterMissingUseBias = 4
    kParameterMissingInChannel = 5
    kParameterMissingOutChannel = 6
    kParameterMissingEps = 7
    kParameterMissingNumFeatures = 8
    kParameterMissingDim = 9
    kParameterMissingExpr = 10
    kParameterMissingOutHW = 11
    kParameterMissingShape = 12
    kParameterMissingGroups = 13
    kParameterMissingScale = 14
    kParameterMissingResizeMode = 15
    kParameterInvalidValue = 16
    kAttrMissingBias = 21
    kAttrMissingWeight = 22
    kAttrMissingRunningMean = 23
    kAttrMissingRunningVar = 24
    kAttrMissingOutFeatures = 25
    kAttrMissingYoloStrides = 26
    kAttrMissingYoloAnchorGrides = 27
    kAttrMissingYoloGrides = 28
    kAttrWrongSize = 29


class KuiperError(Exception):
    """Base class of every error kuiperinfer raises."""


class ModelFormatError(KuiperError):
    """A model file that cannot be read. ``path`` and ``line`` say where (line is 1-based)."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None):
        self.path = path
        self.line = line
        self.reason = message
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(where + message)


class ParamSyntaxError(ModelFormatError):
    """Malformed ``.pnnx.param`` text."""


class CalibrationError(ModelFormatError):
    """A calibration table that cannot be read, or that does not fit the model it is given for."""


class BinArchiveError(ModelFormatError):
    """A ``.pnnx.bin`` archive that is not a valid stored zip, or disagrees with the .param."""


class ExpressionError(KuiperError):
    """A ``pnnx.Expression`` that cannot be tokenised, parsed or evaluated.

    ``position`` is the 0-based character offset in ``expression`` where the problem is.
    """

    def __init__(self, message: str, expression: str | None = None, position: int | None = None):
        self.expression = expression
        self.position = position
        self.reason = message
        text = message
        if expression is not None:
            shown = expression if len(expression) <= 200 else expression[:200] + "..."
            text += f" in expression {shown!r}"
            if position is not None:
                text += f" at position {position}"
        super().__init__(text)


class OptionError(KuiperError, ValueError):
    """A load option out of its range, or options that contradict each other
    (:class:`kuiperinfer.runtime.options.LoadOptions`)."""


class GraphError(KuiperError):
    """A graph that is structurally wrong (cycle, dangling operand) or used in the wrong state."""


class OperatorError(KuiperError):
    """An error about one operator: names it (``op_name``, ``op_type``) and carries a status code."""

    def __init__(self, message: str, op_name: str | None, op_type: str | None, status: IntEnum):
        self.op_name = op_name
        self.op_type = op_type
        self.status = status
        self.reason = message
        prefix = f"operator {op_name!r} ({op_type}): " if op_name is not None else ""
        super().__init__(f"{prefix}{message} [{status.name}]")


class LayerCreateError(OperatorError):
    """Creating the layer of an operator failed (a ParseParameterAttrStatus says what)."""

    def __init__(
        self,
        message: str,
        op_name: str | None = None,
        op_type: str | None = None,
        status: ParseParameterAttrStatus = ParseParameterAttrStatus.kParameterMissingUnknown,
    ):
        super().__init__(message, op_name, op_type, status)


class UnknownOperatorError(LayerCreateError):
    """No layer is registered for an operator's type; ``suggestions`` are the closest types."""

    def __init__(self, op_name: str, op_type: str, suggestions: list[str]):
        self.suggestions = suggestions
        hint = f"; closest registered types: {', '.join(suggestions)}" if suggestions else ""
        super().__init__(
            f"no layer is registered for type {op_type!r}{hint}",
            op_name,
            op_type,
            ParseParameterAttrStatus.kParameterMissingUnknown,
        )


class WeightError(LayerCreateError):
    """A weight attribute is missing or has the wrong size."""


class RegistryError(KuiperError):
    """Misuse of the layer registry (for example registering a type name twice)."""


class InferError(OperatorError):
    """Running the graph failed (an InferStatus says what); names the operator when known."""

    def __init__(
        self,
        message: str,
        op_name: str | None = None,
        op_type: str | None = None,
        status: InferStatus = InferStatus.kInferUnknown,
    ):
        super().__init__(message, op_name, op_type, status)


class InputError(InferError):
    """A graph input that does not fit: names the input and both shapes."""

    def __init__(self, message: str, input_name: str | None = None,
                 expected: tuple | None = None, actual: tuple | None = None):
        self.input_name = input_name
        self.expected = expected
        self.actual = actual
        super().__init__(message, status=InferStatus.kInferFailedInputEmpty)


class ConversionError(KuiperError):
    """Converting an ONNX or TorchScript model with pnnx failed; ``path`` is the model file."""

    def __init__(self, message: str, path: str | None = None):
        self.path = path
        self.reason = message
        super().__init__(f"{path}: {message}" if path is not None else message)


class TensorError(KuiperError):
    """Misuse of :class:`kuiperinfer.tensor.Tensor` (bad index, incompatible shape, bad file)."""
