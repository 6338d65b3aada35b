"""The ``pnnx.Expression`` engine: a formula compiled once, evaluated on arrays.

pnnx keeps a run of small arithmetic operators as one operator whose ``expr`` is a
prefix formula over its inputs, e.g. ``add(mul(@0,0.5),@1)`` or, for a reshape,
``[size(@0,0),-1,16]``. Following KuiperInfer, the text goes through four steps:

1. :mod:`.lexer` -- ``tokenize``: text -> tokens with their spans;
2. :mod:`.parser` -- ``parse``: recursive descent -> syntax tree (:mod:`.nodes`);
3. :mod:`.reverse_polish` -- ``to_reverse_polish``: post-order -> flat stack program;
4. :mod:`.evaluator` -- ``evaluate``: run the program with a stack over NumPy arrays.

>>> expr = compile_expression("add(mul(@0,@1),add(@2,@3))")
>>> format_program(expr.program)
'@0 @1 mul/2 @2 @3 add/2 add/2'
>>> expr.evaluate([2, 3, 4, 5])
15

Steps 1-3 happen once in :func:`compile_expression`; only step 4 runs per call.
The functions an expression may call are listed in :data:`FUNCTIONS`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kuiperinfer.errors import ExpressionError
from kuiperinfer.expression.evaluator import IMPLEMENTATIONS, Value, evaluate
from kuiperinfer.expression.functions import FUNCTIONS, FunctionSpec
from kuiperinfer.expression.lexer import MAX_EXPRESSION_LENGTH, Token, TokenType, tokenize
from kuiperinfer.expression.nodes import Call, Constant, InputRef, List, Node, format_node, walk
from kuiperinfer.expression.parser import MAX_NESTING_DEPTH, parse
from kuiperinfer.expression.reverse_polish import Instruction, OpCode, format_program, to_reverse_polish


class Expression:
    """A compiled expression: the text, its syntax tree and its reverse-Polish program.

    Build it with :func:`compile_expression`; call :meth:`evaluate` (or the object
    itself) with the operator's inputs.
    """

    __slots__ = ("text", "tree", "program", "num_inputs")

    def __init__(self, text: str, tree: Node, program: list[Instruction]):
        self.text = text
        self.tree = tree
        self.program = program
        #: How many inputs the expression needs: one more than the highest ``@N``.
        self.num_inputs = 1 + max(
            (ins.operand for ins in program if ins.opcode is OpCode.INPUT), default=-1)

    def evaluate(self, inputs: Sequence[Any]) -> Value:
        """The value of the expression for ``inputs`` (``inputs[N]`` is ``@N``).

        Returns a NumPy array, a Python number, or a list (for shape expressions).
        """
        return evaluate(self.program, inputs, self.text)

    __call__ = evaluate

    def __repr__(self) -> str:
        return f"Expression({self.text!r})"


def compile_expression(text: str) -> Expression:
    """Tokenize, parse and flatten ``text`` once. Raises :class:`ExpressionError`."""
    tree = parse(text)
    return Expression(text, tree, to_reverse_polish(tree))


__all__ = [
    "Call",
    "Constant",
    "Expression",
    "ExpressionError",
    "FUNCTIONS",
    "FunctionSpec",
    "IMPLEMENTATIONS",
    "InputRef",
    "Instruction",
    "List",
    "MAX_EXPRESSION_LENGTH",
    "MAX_NESTING_DEPTH",
    "Node",
    "OpCode",
    "Token",
    "TokenType",
    "compile_expression",
    "evaluate",
    "format_node",
    "format_program",
    "parse",
    "to_reverse_polish",
    "tokenize",
    "walk",
]
