"""pnnx.Expression: elementwise arithmetic that pnnx kept as one formula.

The formula (``add(mul(@0,0.5),@1)``) is compiled once at build time -- lexer,
recursive-descent parser, reverse-Polish program -- and evaluated on each call with
a stack over whole arrays. See :mod:`kuiperinfer.expression`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from kuiperinfer.errors import ExpressionError, InferError, InferStatus
from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.expression import Expression, compile_expression
from kuiperinfer.kernels.elementwise import InplaceActivation
from kuiperinfer.layers.base import NonParamLayer
from kuiperinfer.layers.fusion import ActivationFusion
from kuiperinfer.pnnx.ir import numpy_dtype
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.registry import register_layer

# Outermost operations that make a new array from array operands; sizes (``size(@0,1)``)
# and lists (``[...]``) are Python values, not arrays.
ARITHMETIC = ("add(", "sub(", "mul(", "div(")
SHAPE = re.compile(r"\[(-?\d+|size\(@\d+,-?\d+\))(,(-?\d+|size\(@\d+,-?\d+\)))*\]")
"""A shape made of numbers and sizes of the inputs (``[size(@0,0),-1,-1]``, for an expand): on
a chunk of the batch it is the chunk's shape, which is what the operator reading it needs."""


@register_layer("pnnx.Expression")
class ExpressionLayer(NonParamLayer):
    fusion = ActivationFusion

    def __init__(self, layer_name: str, expression: Expression,
                 activation: InplaceActivation | None = None):
        super().__init__(layer_name)
        self.expression = expression
        self.activation = activation
        """An activation the graph optimiser fused in, applied in place on the result."""

    @classmethod
    def create(cls, op: RuntimeOperator) -> ExpressionLayer:
        text = op.param_text("expr", Status.kParameterMissingExpr)
        try:
            expression = compile_expression(text)
        except ExpressionError as exc:
            raise op.error(str(exc), Status.kParameterMissingExpr) from exc
        if expression.num_inputs > len(op.input_operands_seq):
            raise op.error(f"expression {text!r} uses {expression.num_inputs} inputs, the operator has "
                           f"{len(op.input_operands_seq)}", Status.kParameterMissingExpr)
        layer = cls(op.name, expression, op.fusion.activation if op.fusion is not None else None)
        # elementwise, so slices of a batch are independent, unless it reads sizes, builds lists
        # or reads no input at all (a constant has no batch dimension to split)
        layer.batch_independent = ("size(" not in text and "[" not in text and expression.num_inputs > 0) \
            or SHAPE.fullmatch(text) is not None
        return layer

    @classmethod
    def takes_activation(cls, op: RuntimeOperator) -> bool:
        """An arithmetic formula of float32 arrays makes a new array."""
        if "expr" not in op.params or len(op.output_operands) != 1:
            return False
        text = op.param_text("expr")
        return (numpy_dtype(op.output_operands[0].type) == np.float32 and text.startswith(ARITHMETIC)
                and "size(" not in text and "[" not in text)

    def forward(self, inputs: Sequence[Any]) -> list[Any]:
        try:
            result = self.expression.evaluate(inputs)
        except ExpressionError as exc:  # an InferError, so that the graph names the operator
            raise InferError(str(exc), status=InferStatus.kInferFailedOperationUnknown) from exc
        if self.activation is not None:
            # the formula's outermost operation made ``result``; a number becomes an array
            result = self.activation(result if isinstance(result, np.ndarray) else np.array(result))
        return [result]
