"""The one table of functions a ``pnnx.Expression`` may call.

The parser checks names and argument counts against :data:`FUNCTIONS`; the evaluator
keeps one NumPy implementation per name (``evaluator.IMPLEMENTATIONS``) and refuses
to load if the two tables disagree.

Where the names come from (Tencent/ncnn, ``tools/pnnx/src``):

* ``pass_level3/fuse_expression.cpp`` writes ``aten::<op>`` as ``<op>(...)``;
  ``aten::__and__`` etc. as ``and``/``or``/``xor``/``lshift``/``rshift``;
  ``aten::rsub(a, b)`` as ``sub(b, a)``; ``add``/``sub`` with ``alpha`` as
  ``add(a, mul(b, alpha))``; ``aten::Int`` as ``int(...)``; a scalar ``Tensor.to``
  as ``torch.bool(...)``/``torch.float(...)``/``torch.long(...)`` (the dtype name);
  ``aten::size(x, d)`` as ``size(@i,d)``; ``prim::ListConstruct`` as ``[a,b,...]``.
* ``aten::div`` with ``rounding_mode='trunc'`` is written ``floor_divide`` and with
  any other rounding mode (including ``'floor'``) plain ``div``.
* ``ir.cpp`` (``expand_expression``), which writes ``<model>_pnnx.py``, turns
  ``div``/``floor_divide``/``remainder`` into the Python operators ``/``, ``//``,
  ``%`` and ``and``..``rshift`` into ``&``, ``|``, ``^``, ``<<``, ``>>``; those
  operators, i.e. torch's ``true_divide``, ``floor_divide`` (rounding down),
  ``remainder`` (sign of the divisor), define what the names mean here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FunctionSpec:
    """How a function may be called: its name, argument count range and kind."""

    name: str
    min_args: int
    max_args: int
    kind: str  # "unary", "binary", "cast" or "shape"

    def accepts(self, count: int) -> bool:
        return self.min_args <= count <= self.max_args

    def arity_text(self) -> str:
        if self.min_args == self.max_args:
            n = self.min_args
            return f"{n} argument" + ("" if n == 1 else "s")
        return f"{self.min_args} to {self.max_args} arguments"


UNARY_FUNCTIONS = (
    "abs", "acos", "acosh", "asin", "asinh", "atan", "atanh", "ceil", "cos", "cosh",
    "erf", "exp", "expm1", "floor", "log", "log10", "log1p", "neg", "reciprocal",
    "round", "rsqrt", "sign", "sin", "sinh", "sqrt", "square", "tan", "tanh", "trunc",
)
CAST_FUNCTIONS = ("int", "torch.bool", "torch.float", "torch.long")
BINARY_FUNCTIONS = (
    "add", "sub", "mul", "div", "floor_divide", "remainder", "pow", "atan2", "fmod",
    "max", "maximum", "min", "minimum", "logaddexp", "and", "or", "xor", "lshift", "rshift",
)


def _build_table() -> dict[str, FunctionSpec]:
    table: dict[str, FunctionSpec] = {}
    for name in UNARY_FUNCTIONS:
        table[name] = FunctionSpec(name, 1, 1, "unary")
    for name in CAST_FUNCTIONS:
        table[name] = FunctionSpec(name, 1, 1, "cast")
    for name in BINARY_FUNCTIONS:
        table[name] = FunctionSpec(name, 2, 2, "binary")
    # size(@0,d) is one dimension, size(@0) the whole shape.
    table["size"] = FunctionSpec("size", 1, 2, "shape")
    return table


#: Every function an expression may call, by the name pnnx writes.
FUNCTIONS: dict[str, FunctionSpec] = _build_table()
