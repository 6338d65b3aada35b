"""The syntax tree of an expression: four node kinds.

``add(mul(@0,2),[size(@1,0),-1])`` is::

    Call("add", (Call("mul", (InputRef(0), Constant(2))),
                 List((Call("size", (InputRef(1), Constant(0))), Constant(-1)))))

Nodes are immutable. ``start``/``end`` give the node's span in the text (``-1`` when a
node was built by hand); they do not take part in ``==`` so that trees can be compared
by shape alone. Walking helpers here are iterative, so trees nested hundreds of levels
deep never hit Python's recursion limit.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass(frozen=True)
class InputRef:
    """``@N``: the N-th input of the operator."""

    index: int
    start: int = field(default=-1, compare=False)
    end: int = field(default=-1, compare=False)

    def __str__(self) -> str:
        return f"@{self.index}"


@dataclass(frozen=True, eq=False)
class Constant:
    """A literal: int, float (including inf/nan), complex, bool or None."""

    value: int | float | complex | bool | None
    start: int = field(default=-1)
    end: int = field(default=-1)

    def __eq__(self, other: object) -> bool:
        # 1, 1.0 and True are different literals; nan equals nan here.
        if not isinstance(other, Constant):
            return NotImplemented
        if type(self.value) is not type(other.value):
            return False
        return _parts(self.value) == _parts(other.value)

    def __hash__(self) -> int:
        return hash((type(self.value), _parts(self.value)))

    def __str__(self) -> str:
        return format_constant(self.value)


@dataclass(frozen=True)
class List:
    """``[a,b,...]``: a list literal whose items are expressions (pnnx's ListConstruct)."""

    items: tuple[Node, ...]
    start: int = field(default=-1, compare=False)
    end: int = field(default=-1, compare=False)

    def __str__(self) -> str:
        return format_node(self)


@dataclass(frozen=True)
class Call:
    """``name(args...)``: a call of a function from :data:`functions.FUNCTIONS`."""

    name: str
    args: tuple[Node, ...]
    start: int = field(default=-1, compare=False)
    end: int = field(default=-1, compare=False)

    def __str__(self) -> str:
        return format_node(self)


Node = InputRef | Constant | List | Call


def _parts(value: int | float | complex | bool | None) -> tuple:
    """A literal as a tuple that compares NaN equal to NaN (a complex by its two parts)."""
    numbers = (value.real, value.imag) if isinstance(value, complex) else (value,)
    return tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in numbers)


def children(node: Node) -> tuple[Node, ...]:
    """The direct sub-expressions of ``node`` (empty for leaves)."""
    if isinstance(node, Call):
        return node.args
    if isinstance(node, List):
        return node.items
    return ()


def walk(node: Node) -> Iterator[Node]:
    """Every node of the tree, parents before children, left to right (no recursion)."""
    pending = [node]
    while pending:
        current = pending.pop()
        yield current
        pending.extend(reversed(children(current)))


def format_constant(value: int | float | complex | bool | None) -> str:
    if isinstance(value, float):
        return repr(value)  # 0.5, 1e-05, inf, -inf, nan
    if isinstance(value, complex):  # as pnnx writes it, real part then signed imaginary part: 1.0-2.0j
        imag = repr(value.imag)
        return f"{value.real!r}{imag if imag.startswith('-') else '+' + imag}j"
    return str(value)


def format_node(node: Node) -> str:
    """Write the tree back as pnnx-style prefix text, e.g. ``add(@0,[1,2])`` (no recursion)."""
    out: list[str] = []
    pending: list[tuple[Node, bool]] = [(node, False)]
    while pending:
        current, children_done = pending.pop()
        if isinstance(current, InputRef):
            out.append(f"@{current.index}")
        elif isinstance(current, Constant):
            out.append(format_constant(current.value))
        elif children_done:
            count = len(children(current))
            parts = out[len(out) - count:]
            del out[len(out) - count:]
            inner = ",".join(parts)
            out.append(f"{current.name}({inner})" if isinstance(current, Call) else f"[{inner}]")
        else:
            pending.append((current, True))
            pending.extend((child, False) for child in reversed(children(current)))
    return out[0]
