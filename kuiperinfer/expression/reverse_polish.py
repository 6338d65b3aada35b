"""Step 3: flatten the syntax tree into reverse Polish order (KuiperInfer's ``ReversePolish``).

A post-order walk puts every operand before the function that consumes it::

    add(mul(@0,@1),add(@2,@3))   ->   @0 @1 mul/2 @2 @3 add/2 add/2

The result is a flat program for a stack machine: ``INPUT`` and ``CONST`` push a value,
``CALL name/n`` pops ``n`` values and pushes the result, ``LIST n`` pops ``n`` values
and pushes them as one Python list. Evaluating it needs no recursion at all.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, NamedTuple

from kuiperinfer.errors import ExpressionError
from kuiperinfer.expression.nodes import Call, Constant, InputRef, List, Node, children, format_constant


class OpCode(Enum):
    INPUT = "INPUT"   # push inputs[operand]
    CONST = "CONST"   # push the literal operand
    LIST = "LIST"     # pop `count` values, push them as a list
    CALL = "CALL"     # pop `count` values, push FUNCTION[operand](*values)


class Instruction(NamedTuple):
    """One step of the stack program.

    ``operand`` is the input index (INPUT), the literal (CONST), the function name
    (CALL) or ``None`` (LIST); ``count`` is how many stack values the step pops;
    ``position`` is where the step's node starts in the text, for error messages.
    """

    opcode: OpCode
    operand: Any = None
    count: int = 0
    position: int = -1

    def __str__(self) -> str:
        if self.opcode is OpCode.INPUT:
            return f"@{self.operand}"
        if self.opcode is OpCode.CONST:
            return format_constant(self.operand)
        if self.opcode is OpCode.LIST:
            return f"[{self.count}]"
        return f"{self.operand}/{self.count}"


def to_reverse_polish(tree: Node) -> list[Instruction]:
    """The post-order (operands first, then the function with its arity) of ``tree``.

    Iterative: a work stack of ``(node, children_done)`` pairs replaces recursion.
    """
    program: list[Instruction] = []
    pending: list[tuple[Node, bool]] = [(tree, False)]
    while pending:
        node, children_done = pending.pop()
        if isinstance(node, InputRef):
            program.append(Instruction(OpCode.INPUT, node.index, 0, node.start))
        elif isinstance(node, Constant):
            program.append(Instruction(OpCode.CONST, node.value, 0, node.start))
        elif children_done:
            if isinstance(node, Call):
                program.append(Instruction(OpCode.CALL, node.name, len(node.args), node.start))
            else:
                program.append(Instruction(OpCode.LIST, None, len(node.items), node.start))
        elif isinstance(node, (Call, List)):
            pending.append((node, True))
            # Pushed in reverse so the leftmost child is emitted first.
            pending.extend((child, False) for child in reversed(children(node)))
        else:
            raise ExpressionError(f"not an expression node: {node!r}")
    return program


def format_program(program: list[Instruction]) -> str:
    """The program on one line, e.g. ``@0 @1 mul/2 @2 @3 add/2 add/2``."""
    return " ".join(str(instruction) for instruction in program)
