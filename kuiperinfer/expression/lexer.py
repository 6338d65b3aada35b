"""Step 1 of KuiperInfer's expression pipeline: cut the text into tokens.

``add(mul(@0,5.000000e-01),size(@1,-1))`` becomes::

    IDENT add, LPAREN, IDENT mul, LPAREN, INPUT @0, COMMA, FLOAT 0.5, RPAREN, COMMA,
    IDENT size, LPAREN, INPUT @1, COMMA, INT -1, RPAREN, RPAREN, END

Every token remembers its span ``[start, end)`` in the text so that later errors can
point at the exact character.

Literal forms pnnx writes (``fuse_expression.cpp`` prints constants with ``%d``/``%ld``
and ``%e``; ``eval_expression.cpp`` re-prints folded values in the .param float format):
``-1``, ``2147483647``, ``5.000000e-01``, ``1.000000e-5``, ``0.5``, ``-2.0``, ``inf``,
``-inf``, ``nan`` (and glibc's ``-nan``), ``True``, ``False``, ``None``, and complex
constants, which ``fuse_expression.cpp`` prints with ``%e%+ej``: the real part, the signed
imaginary part and a ``j`` in one token (``1.000000e+00-2.000000e+00j`` is 1-2j;
``-nan+infj`` and the like where a part is not finite).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from enum import Enum
from typing import NamedTuple

from kuiperinfer.errors import ExpressionError

#: Longest expression text accepted. Real pnnx expressions are well under a few
#: thousand characters; the limit keeps hostile input from costing seconds.
MAX_EXPRESSION_LENGTH = 65_536


class TokenType(Enum):
    INPUT = "input"        # @N, value is N
    INT = "int"            # value is a Python int
    FLOAT = "float"        # value is a Python float
    COMPLEX = "complex"    # value is a Python complex
    BOOL = "bool"          # True / False
    NONE = "none"          # None
    IDENT = "identifier"   # function name, possibly dotted: torch.float
    LPAREN = "("
    RPAREN = ")"
    LBRACKET = "["
    RBRACKET = "]"
    COMMA = ","
    END = "end of expression"


class Token(NamedTuple):
    """One token: its type, its text, its span ``[start, end)`` and its literal value."""

    type: TokenType
    text: str
    start: int
    end: int
    value: int | float | complex | bool | None = None

    def describe(self) -> str:
        """How to name this token in an error message."""
        if self.type is TokenType.END:
            return "the end of the expression"
        return repr(self.text)


_PUNCTUATION = {
    "(": TokenType.LPAREN,
    ")": TokenType.RPAREN,
    "[": TokenType.LBRACKET,
    "]": TokenType.RBRACKET,
    ",": TokenType.COMMA,
}

_NUMBER = r"-?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\d+)"
_FLOAT_WORD = r"-?(?:inf|nan)(?![A-Za-z0-9_.])"

# One alternative per token kind, most frequent first, tried at the current position.
_TOKEN_RE = re.compile(
    rf"""
    (?P<punct>[()\[\],])
  | (?P<input>@\d*)
  | (?P<floatword>{_FLOAT_WORD})
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
  | (?P<number>{_NUMBER})
  | (?P<space>\s+)
    """,
    re.VERBOSE,
)
# pnnx prints a complex constant as "%e%+ej": a number, a signed number and a "j", where
# either number may be a word (inf, nan; "-nan" and "+nan" from glibc).
_UNSIGNED = r"(?:\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\d+|inf|nan)"
_COMPLEX_RE = re.compile(rf"(-?{_UNSIGNED})([-+]{_UNSIGNED})j(?![A-Za-z0-9_.+-])")

# Characters that may not directly follow a number (``1.5.3``, ``2abc``).
_NUMBER_TAIL = re.compile(r"[A-Za-z0-9_.+-]+")
_AFTER_NUMBER_FORBIDDEN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.+-")

_KEYWORDS = {
    "True": (TokenType.BOOL, True),
    "False": (TokenType.BOOL, False),
    "None": (TokenType.NONE, None),
}


def _parse_int(text: str, expr: str, pos: int) -> int:
    """An int literal; pnnx writes them with %d/%ld, so they fit in int64."""
    if len(text) <= 18:
        return int(text)
    if len(text.lstrip("-")) > 19 or not -(1 << 63) <= int(text) < (1 << 63):
        raise ExpressionError(f"integer literal {text!r} is out of the int64 range", expr, pos)
    return int(text)


def tokenize(expr: str) -> list[Token]:
    """Split ``expr`` into tokens, ending with one ``END`` token.

    Raises :class:`ExpressionError` naming the position of an unexpected character,
    a malformed number, ``@`` without an index, or a text longer than
    :data:`MAX_EXPRESSION_LENGTH`.
    """
    return list(iter_tokens(expr))


def iter_tokens(expr: str) -> Iterator[Token]:
    """Yield the tokens of ``expr`` one by one (the last is ``END``).

    The parser reads tokens from this generator, so the first problem in reading
    order is the one reported: ``__import__('os')`` fails as an unknown function
    before the lexer ever reaches the quote.
    """
    if not isinstance(expr, str):
        raise ExpressionError(f"an expression must be a string, not {type(expr).__name__}")
    if len(expr) > MAX_EXPRESSION_LENGTH:
        raise ExpressionError(
            f"expression is too long ({len(expr)} characters; at most "
            f"{MAX_EXPRESSION_LENGTH} are accepted)", expr, MAX_EXPRESSION_LENGTH)

    pos = 0
    n = len(expr)
    match = _TOKEN_RE.match
    while pos < n:
        m = match(expr, pos)
        if m is None:
            raise ExpressionError(f"unexpected character {expr[pos]!r}", expr, pos)
        kind = m.lastgroup
        text = m.group()
        end = m.end()
        if kind == "punct":
            yield Token(_PUNCTUATION[text], text, pos, end)
        elif kind == "ident":
            token_type, value = _KEYWORDS.get(text, (TokenType.IDENT, None))
            yield Token(token_type, text, pos, end, value)
        elif kind == "input":
            if len(text) == 1:
                raise ExpressionError("'@' must be followed by an input index such as @0", expr, pos)
            yield Token(TokenType.INPUT, text, pos, end, int(text[1:]))
        elif kind == "number" or kind == "floatword":
            if end < n and expr[end] in _AFTER_NUMBER_FORBIDDEN:
                complex_literal = _COMPLEX_RE.match(expr, pos)
                if complex_literal is not None:
                    real, imag = complex_literal.groups()
                    end = complex_literal.end()
                    yield Token(TokenType.COMPLEX, expr[pos:end], pos, end, complex(float(real), float(imag)))
                    pos = end
                    continue
                bad = expr[pos:_NUMBER_TAIL.match(expr, end).end()]
                raise ExpressionError(f"malformed number {bad!r}", expr, pos)
            if kind == "floatword" or "." in text or "e" in text or "E" in text:
                yield Token(TokenType.FLOAT, text, pos, end, float(text))
            else:
                yield Token(TokenType.INT, text, pos, end, _parse_int(text, expr, pos))
        # "space" produces no token
        pos = end
    yield Token(TokenType.END, "", n, n)
