"""Step 2: a recursive-descent parser from tokens to a syntax tree.

Grammar (pnnx writes prefix calls only; there are no infix operators)::

    expression := value END
    value      := INPUT | INT | FLOAT | BOOL | NONE | list | call
    list       := "[" [ value ("," value)* ] "]"
    call       := IDENT "(" [ value ("," value)* ] ")"

Each ``value`` is parsed by one call of :meth:`Parser._parse_value`, which handles
the argument list of a call or the items of a list itself, so nesting costs exactly
one Python frame per level. The depth is capped at :data:`MAX_NESTING_DEPTH`; deeper
input fails with a clear :class:`ExpressionError` long before Python's own limit.

Function names and argument counts are checked against the one table
:data:`kuiperinfer.expression.functions.FUNCTIONS`.
"""

from __future__ import annotations

import difflib

from kuiperinfer.errors import ExpressionError
from kuiperinfer.expression.functions import FUNCTIONS
from kuiperinfer.expression.lexer import Token, TokenType, iter_tokens
from kuiperinfer.expression.nodes import Call, Constant, InputRef, List, Node

#: Deepest nesting of calls and lists accepted. pnnx expressions rarely exceed 30.
MAX_NESTING_DEPTH = 512

_LITERALS = (TokenType.INT, TokenType.FLOAT, TokenType.BOOL, TokenType.NONE)


class Parser:
    """Parses one expression text; use :func:`parse`."""

    def __init__(self, text: str):
        self.text = text
        self._tokens = iter_tokens(text)
        self.current: Token = next(self._tokens)

    def _error(self, message: str, position: int) -> ExpressionError:
        return ExpressionError(message, self.text, position)

    def _advance(self) -> Token:
        """Consume and return the current token (END is never passed)."""
        token = self.current
        if token.type is not TokenType.END:
            self.current = next(self._tokens)
        return token

    def parse(self) -> Node:
        if self.current.type is TokenType.END:
            raise self._error("empty expression", 0)
        node = self._parse_value(1)
        if self.current.type is not TokenType.END:
            raise self._error(
                f"unexpected {self.current.describe()} after the end of the expression",
                self.current.start)
        return node

    def _parse_value(self, depth: int) -> Node:
        """Parse one value at nesting ``depth``; a call's or list's items recurse here directly."""
        token = self._advance()
        kind = token.type
        if kind is TokenType.INPUT:
            return InputRef(token.value, token.start, token.end)  # type: ignore[arg-type]
        if kind in _LITERALS:
            return Constant(token.value, token.start, token.end)
        if kind is TokenType.IDENT:
            name: Token | None = token
            opening = self._check_call_start(token)
            closer = TokenType.RPAREN
        elif kind is TokenType.LBRACKET:
            name, opening, closer = None, token, TokenType.RBRACKET
        else:
            raise self._error(f"expected a value but found {token.describe()}", token.start)

        if depth > MAX_NESTING_DEPTH:
            raise self._error(
                f"expression is nested too deeply (more than {MAX_NESTING_DEPTH} levels "
                f"of calls and lists)", token.start)

        # The items: value ("," value)* up to the closer, each one level deeper.
        items: list[Node] = []
        if self.current.type is closer:
            end = self._advance().end
        else:
            while True:
                items.append(self._parse_value(depth + 1))
                separator = self._advance()
                if separator.type is TokenType.COMMA:
                    continue
                if separator.type is closer:
                    end = separator.end
                    break
                raise self._unclosed_error(opening, closer, separator)

        if name is None:
            return List(tuple(items), opening.start, end)
        spec = FUNCTIONS[name.text]
        if not spec.accepts(len(items)):
            raise self._error(
                f"function {name.text!r} takes {spec.arity_text()} but {len(items)} "
                f"{'was' if len(items) == 1 else 'were'} given", name.start)
        return Call(name.text, tuple(items), name.start, end)

    def _check_call_start(self, name: Token) -> Token:
        """Check that ``name`` is a known function followed by '('; consume and return the '('."""
        if name.text not in FUNCTIONS:
            what = "function" if self.current.type is TokenType.LPAREN else "name"
            hint = difflib.get_close_matches(name.text, FUNCTIONS, n=1)
            suffix = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise self._error(f"unknown {what} {name.text!r}{suffix}", name.start)
        opening = self._advance()
        if opening.type is not TokenType.LPAREN:
            raise self._error(
                f"function {name.text!r} must be followed by '(' but found {opening.describe()}",
                opening.start)
        return opening

    def _unclosed_error(self, opening: Token, closer: TokenType, found: Token) -> ExpressionError:
        expected = f"',' or '{closer.value}'"
        if found.type is TokenType.END:
            return self._error(
                f"expected {expected} but reached the end of the expression: the "
                f"{opening.text!r} at position {opening.start} is never closed", found.start)
        return self._error(
            f"expected {expected} but found {found.describe()} (to close the "
            f"{opening.text!r} at position {opening.start})", found.start)


def parse(text: str) -> Node:
    """Parse an expression text into its syntax tree.

    Raises :class:`ExpressionError` (with the position) for an empty text, unknown
    functions, wrong argument counts, unbalanced brackets, stray commas, trailing
    text, excessive nesting and everything the lexer refuses.
    """
    try:
        return Parser(text).parse()
    except RecursionError:
        # Only possible when the caller's own stack is already nearly exhausted.
        raise ExpressionError("expression is nested too deeply for the Python stack", text) from None
