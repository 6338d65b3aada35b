"""pnnx.Expression: elementwise arithmetic that pnnx kept as one formula.

The formula (``add(mul(@0,0.5),@1)``) is compiled once at build time -- lexer,
recursive-descent parser, reverse-Polish program -- and evaluated on each call with
a stack over whole arrays. See :mod:`kuiperinfer.expression`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kuiperinfer.errors import ExpressionError, InferError, InferStatus
from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.expression import FUNCTIONS, Call, Expression, List, OpCode, compile_expression, walk
from kuiperinfer.kernels.elementwise import InplaceActivation
from kuiperinfer.layers.base import ActivationPlan, NonParamLayer
from kuiperinfer.pnnx.dtypes import numpy_dtype
from kuiperinfer.runtime.batching import Batch, sequence_flow
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer

ARITHMETIC = ("add", "sub", "mul", "div")
"""Outermost operations that make a new array from array operands (sizes, ``size(@0,1)``,
and lists, ``[...]``, are Python values, not arrays)."""
UFUNCS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide}


def _plain(value: Any) -> bool:
    """A float32 array of one dimension or more, or a Python number: what the binary form takes."""
    return type(value) in (int, float) or (type(value) is np.ndarray and value.dtype == np.float32 and value.ndim > 0)


def binary_form(expression: Expression) -> tuple[np.ufunc, Any, Any] | None:
    """For a formula that is one arithmetic operation on two inputs, or on an input and a
    number (``add(@0,@1)``, ``mul(@0,0.5)``): its ufunc and operands, an operand an input's
    index or a number in a 1-tuple; None for any other formula."""
    program = expression.program
    if len(program) != 3 or program[2].opcode is not OpCode.CALL or program[2].operand not in UFUNCS:
        return None
    operands = []
    for instruction in program[:2]:
        if instruction.opcode is OpCode.INPUT:
            operands.append(instruction.operand)
        elif instruction.opcode is OpCode.CONST and type(instruction.operand) in (int, float):
            operands.append((instruction.operand,))
        else:
            return None
    return UFUNCS[program[2].operand], operands[0], operands[1]


@register_layer("pnnx.Expression")
class ExpressionLayer(NonParamLayer):
    plan_class = ActivationPlan

    def __init__(self, layer_name: str, expression: Expression,
                 activation: InplaceActivation | None = None, ranks: Sequence[int] = ()):
        super().__init__(layer_name)
        self.expression = expression
        self.activation = activation
        """An activation the graph optimiser fused in, applied in place on the result."""
        self.ranks = tuple(ranks)
        """How many dimensions pnnx recorded for each input (0: unknown), for ``size(@i,-1)``."""
        self.binary = binary_form(expression)
        """The formula as one ufunc on two operands, which float32 arrays take directly, without
        the stack program (whose type promotion gives the same result on them); or None."""

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> ExpressionLayer:
        text = op.param_text("expr", Status.kParameterMissingExpr)
        try:
            expression = compile_expression(text)
        except ExpressionError as exc:
            raise op.error(str(exc), Status.kParameterMissingExpr) from exc
        if expression.num_inputs > len(op.input_operands_seq):
            raise op.error(f"expression {text!r} uses {expression.num_inputs} inputs, the operator has "
                           f"{len(op.input_operands_seq)}", Status.kParameterMissingExpr)
        return cls(op.name, expression, op.plan.activation if op.plan is not None else None,
                   [len(o.shapes) for o in op.input_operands_seq])

    def batch_flow(self, inputs: Sequence[Batch]) -> Batch | None:
        """The formula's program run on what its inputs are to the batch instead of on values:
        arithmetic keeps rows apart, ``size(@i,0)`` of a batched input is the batch size, and a
        list starting with it is a shape for the batch (``[size(@0,0),-1,16]``); arithmetic on
        the batch size, or ``int()`` of a batched array, mixes samples."""
        stack: list[tuple[Batch | None, Any, int | None]] = []   # (role, literal, input index)
        for instruction in self.expression.program:
            if instruction.opcode is OpCode.INPUT:
                stack.append((inputs[instruction.operand], None, instruction.operand))
                continue
            if instruction.opcode is OpCode.CONST:
                stack.append((Batch.SHARED, instruction.operand, None))
                continue
            args = stack[len(stack) - instruction.count:]
            del stack[len(stack) - instruction.count:]
            roles = [role for role, _, _ in args]
            if None in roles:
                role = None
            elif instruction.opcode is OpCode.LIST:
                role = sequence_flow(roles)
            elif instruction.operand == "size":
                role = self._size_flow(args)
            elif FUNCTIONS[instruction.operand].kind == "cast":
                role = None if instruction.operand == "int" and Batch.ROWS in roles else roles[0]
            else:   # unary and binary arithmetic
                role = None if Batch.SIZE in roles else Batch.ROWS if Batch.ROWS in roles else Batch.SHARED
            stack.append((role, None, None))
        return stack[-1][0]

    def _size_flow(self, args: Sequence[tuple[Batch | None, Any, int | None]]) -> Batch | None:
        """``size(@i)`` or ``size(@i,d)``: the batch size when ``d`` is the batch's dimension."""
        role, _, index = args[0]
        if role is not Batch.ROWS:
            return Batch.SHARED if role is Batch.SHARED else None
        if len(args) == 1:
            return Batch.SIZE   # the whole shape, which starts with the batch
        dim = args[1][1]
        if type(dim) is not int:
            return None
        rank = self.ranks[index] if index is not None and index < len(self.ranks) else 0
        if dim < 0 and rank == 0:
            return None
        return Batch.SIZE if dim == 0 or dim + rank == 0 else Batch.SHARED

    @classmethod
    def takes_activation(cls, op: RuntimeOperator) -> bool:
        """An arithmetic formula of float32 arrays makes a new array."""
        if "expr" not in op.params or len(op.output_operands) != 1 \
                or numpy_dtype(op.output_operands[0].type) != np.float32:
            return False
        try:
            tree = compile_expression(op.param_text("expr")).tree
        except ExpressionError:
            return False
        return isinstance(tree, Call) and tree.name in ARITHMETIC and not any(
            isinstance(node, List) or (isinstance(node, Call) and node.name == "size") for node in walk(tree))

    def forward(self, inputs: Sequence[Any]) -> list[Any]:
        if self.binary is not None:
            ufunc, first, second = self.binary
            a = inputs[first] if type(first) is int else first[0]
            b = inputs[second] if type(second) is int else second[0]
            if _plain(a) and _plain(b) and (type(a) is np.ndarray or type(b) is np.ndarray):
                result = ufunc(a, b)
                return [result if self.activation is None else self.activation(result)]
        try:
            result = self.expression.evaluate(inputs)
        except ExpressionError as exc:  # an InferError, so that the graph names the operator
            raise InferError(str(exc), status=InferStatus.kInferFailedOperationUnknown) from exc
        if self.activation is not None:
            # the formula's outermost operation made ``result``; a number becomes an array
            result = self.activation(result if isinstance(result, np.ndarray) else np.array(result))
        return [result]

