"""Step 2: a recursive-descent parser from tokens to a syntax tree.

Grammar (pnnx writes prefix calls only; there are no infix operators)::

    expression := value END
    value      := INPUT | INT | FLOAT | COMPLEX | BOOL | NONE | list | call
    list       := "[" [ value ("," value)* ] "]"
    call       := IDENT "(" [ value ("," value)* ] ")"

Each ``value`` is parsed by one call of :meth:`Parser._parse_value`, which handles
the argument list of a call or the items of a list itself, so nesting costs exactly
one Python frame per level. The depth is capped at :data:`MAX_NESTING_DEPTH`; deeper
input fails with a clear :class:`ExpressionError` long before Python's own limit.

Function names and argument counts are checked against the one table
:data:`kuiperinfer.expression.functions.FUNCTIONS`.

pnnx's own readers (``expand_expression`` in ``ir.cpp``, which writes ``<model>_pnnx.py``,
and ``eval_expression.cpp``) do not use the brackets and commas at all: they drop them and
read the remaining tokens in prefix order, right to left, each function taking its fixed
number of arguments (``size`` one when nothing else is left, else two) and ``[`` taking
everything left. The pnnx binary relies on that: ``eval_expression.cpp``, which re-prints
every expression, knows no ``expm1`` and ``log1p`` and prints them as bare names, so
``mul(expm1(@0),2)`` reaches the file as ``mul(expm1,@0),2`` -- brackets misplaced, tokens
in the right order. A text the grammar refuses is therefore read the way pnnx reads it
(:func:`read_in_token_order`) when it has pnnx's mark: brackets that balance and a
function name with no ``(`` after it. Everything else keeps the grammar's error.
"""

from __future__ import annotations

import difflib

from kuiperinfer.errors import ExpressionError
from kuiperinfer.expression.functions import FUNCTIONS
from kuiperinfer.expression.lexer import Token, TokenType, iter_tokens, tokenize
from kuiperinfer.expression.nodes import Call, Constant, InputRef, List, Node

#: Deepest nesting of calls and lists accepted. pnnx expressions rarely exceed 30.
MAX_NESTING_DEPTH = 512

_LITERALS = (TokenType.INT, TokenType.FLOAT, TokenType.COMPLEX, TokenType.BOOL, TokenType.NONE)
_SEPARATORS = (TokenType.LPAREN, TokenType.RPAREN, TokenType.COMMA, TokenType.RBRACKET, TokenType.END)


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
    text, excessive nesting and everything the lexer refuses -- unless the text is one
    the pnnx binary writes with misplaced brackets, read as pnnx reads it
    (:func:`read_in_token_order`).
    """
    try:
        return Parser(text).parse()
    except RecursionError:
        # Only possible when the caller's own stack is already nearly exhausted.
        raise ExpressionError("expression is nested too deeply for the Python stack", text) from None
    except ExpressionError:
        tree = read_in_token_order(text)
        if tree is None:
            raise
        return tree


def read_in_token_order(text: str) -> Node | None:
    """Read ``text`` as pnnx's readers do, ignoring brackets and commas; None unless it has
    the mark of the pnnx binary's misplaced brackets or cannot be read that way.

    The mark: the lexer accepts the text, its brackets balance and some function name is
    not followed by ``(``. The tokens other than ``( ) , ]`` are then taken right to left
    onto a stack: a value is pushed; a function pops its arguments (the first on top),
    ``size`` one when it is the last value else two; ``[`` pops every value into a list.
    Exactly one value must be left. ``mul(expm1,@0),2`` is ``mul(expm1(@0),2)``.
    """
    try:
        tokens = tokenize(text)
    except ExpressionError:
        return None
    bare_name = any(token.type is TokenType.IDENT and token.text in FUNCTIONS
                    and following.type is not TokenType.LPAREN
                    for token, following in zip(tokens, tokens[1:]))
    if not bare_name or not _balanced(tokens):
        return None
    stack: list[Node] = []
    depths: list[int] = []  # the nesting depth of each value on the stack
    for token in reversed(tokens):
        kind = token.type
        if kind in _SEPARATORS:
            continue
        if kind is TokenType.INPUT:
            stack.append(InputRef(token.value, token.start, token.end))  # type: ignore[arg-type]
            depths.append(0)
            continue
        if kind in _LITERALS:
            stack.append(Constant(token.value, token.start, token.end))
            depths.append(0)
            continue
        if kind is TokenType.LBRACKET:
            count = len(stack)
        else:  # an identifier
            spec = FUNCTIONS.get(token.text)
            if spec is None:
                return None
            count = spec.max_args if len(stack) >= spec.max_args else spec.min_args
            if len(stack) < count:
                return None
        items = tuple(stack[len(stack) - count:][::-1])  # the first argument was on top
        depth = 1 + max(depths[len(depths) - count:], default=0)
        del stack[len(stack) - count:], depths[len(depths) - count:]
        if depth > MAX_NESTING_DEPTH:
            raise ExpressionError(f"expression is nested too deeply (more than {MAX_NESTING_DEPTH} "
                                  f"levels of calls and lists)", text, token.start)
        end = max((item.end for item in items), default=token.end)
        node = List(items, token.start, end) if kind is TokenType.LBRACKET else \
            Call(token.text, items, token.start, end)
        stack.append(node)
        depths.append(depth)
    return stack[0] if len(stack) == 1 else None


def _balanced(tokens: list[Token]) -> bool:
    """Whether every '(' and '[' is closed by its own kind, in order."""
    closers = {TokenType.LPAREN: TokenType.RPAREN, TokenType.LBRACKET: TokenType.RBRACKET}
    expected: list[TokenType] = []
    for token in tokens:
        if token.type in closers:
            expected.append(closers[token.type])
        elif token.type in (TokenType.RPAREN, TokenType.RBRACKET):
            if not expected or expected.pop() is not token.type:
                return False
    return not expected
