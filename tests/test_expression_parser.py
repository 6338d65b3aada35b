"""Lexer, parser and reverse-Polish tests for kuiperinfer.expression."""

from __future__ import annotations

import math

import pytest
from cpu_time import cpu_time

from kuiperinfer.errors import ExpressionError
from kuiperinfer.expression import (
    FUNCTIONS,
    MAX_EXPRESSION_LENGTH,
    MAX_NESTING_DEPTH,
    Call,
    Constant,
    InputRef,
    Instruction,
    List,
    OpCode,
    TokenType,
    compile_expression,
    format_node,
    format_program,
    parse,
    to_reverse_polish,
    tokenize,
    walk,
)
from kuiperinfer.expression.evaluator import IMPLEMENTATIONS

T = TokenType


def kinds(text: str) -> list[TokenType]:
    return [token.type for token in tokenize(text)]


def error_of(text: str) -> ExpressionError:
    with pytest.raises(ExpressionError) as info:
        parse(text)
    return info.value


# --------------------------------------------------------------------------- lexer


def test_token_spans_cover_the_text():
    text = "add(@0,size(@12,-1))"
    tokens = tokenize(text)
    assert [(t.type, t.text, t.start, t.end) for t in tokens] == [
        (T.IDENT, "add", 0, 3), (T.LPAREN, "(", 3, 4), (T.INPUT, "@0", 4, 6),
        (T.COMMA, ",", 6, 7), (T.IDENT, "size", 7, 11), (T.LPAREN, "(", 11, 12),
        (T.INPUT, "@12", 12, 15), (T.COMMA, ",", 15, 16), (T.INT, "-1", 16, 18),
        (T.RPAREN, ")", 18, 19), (T.RPAREN, ")", 19, 20), (T.END, "", 20, 20),
    ]
    assert tokens[2].value == 12 - 12 and tokens[6].value == 12


@pytest.mark.parametrize("text, value", [
    ("5.000000e-01", 0.5), ("-2.500000e+00", -2.5), ("1.000000e-5", 1e-5), ("1e-05", 1e-5),
    ("1.5", 1.5), ("-2.0", -2.0), ("0.0", 0.0), ("3.", 3.0), (".5", 0.5), ("2E3", 2000.0),
])
def test_float_literal_forms(text, value):
    (token, end) = tokenize(text)
    assert token.type is T.FLOAT and token.value == value and end.type is T.END


@pytest.mark.parametrize("text", ["inf", "-inf", "nan", "-nan"])
def test_inf_and_nan_literals(text):
    token = tokenize(text)[0]
    assert token.type is T.FLOAT
    expected = float(text)
    assert (math.isnan(token.value) and math.isnan(expected)) or token.value == expected


def test_int_bool_none_and_dotted_identifiers():
    tokens = tokenize("torch.float(True,False,None,-7,2147483647)")
    assert [(t.type, t.value) for t in tokens[:1] + tokens[2:-2:2]] == [
        (T.IDENT, None), (T.BOOL, True), (T.BOOL, False), (T.NONE, None), (T.INT, -7),
        (T.INT, 2147483647)]
    assert tokens[0].text == "torch.float"
    assert type(tokens[8].value) is int


def test_identifier_starting_with_inf_is_not_a_number():
    assert kinds("info") == [T.IDENT, T.END]


def test_whitespace_is_skipped():
    assert kinds(" add( @0 , 1 ) ") == [T.IDENT, T.LPAREN, T.INPUT, T.COMMA, T.INT, T.RPAREN, T.END]


def test_list_tokens():
    assert kinds("[1,@0]") == [T.LBRACKET, T.INT, T.COMMA, T.INPUT, T.RBRACKET, T.END]


@pytest.mark.parametrize("text, position, words", [
    ("add(@,1)", 4, "'@' must be followed"),
    ("@", 0, "'@' must be followed"),
    ("add(@0,$)", 7, "unexpected character '$'"),
    ("mul(@0,1.5.3)", 7, "malformed number '1.5.3'"),
    ("mul(@0,2abc)", 7, "malformed number '2abc'"),
    ("add(@0,1.000000e+00+-2.000000e+00j)", 7, "malformed number '1.000000e+00+-2.000000e+00j'"),
    ("add(@0,1.0+2.0jk)", 7, "malformed number '1.0+2.0jk'"),
    ("add(@0,99999999999999999999)", 7, "out of the int64 range"),
    ("add(@0,+1)", 7, "unexpected character '+'"),
])
def test_lexer_errors_name_the_position(text, position, words):
    with pytest.raises(ExpressionError) as info:
        tokenize(text)
    assert info.value.position == position
    assert words in str(info.value)
    assert info.value.expression == text


def test_tokenize_rejects_non_strings():
    with pytest.raises(ExpressionError):
        tokenize(None)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- parser


def test_tree_shape():
    tree = parse("add(mul(@0,5.000000e-01),[size(@1,0),-1,True,None])")
    assert tree == Call("add", (
        Call("mul", (InputRef(0), Constant(0.5))),
        List((Call("size", (InputRef(1), Constant(0))), Constant(-1), Constant(True), Constant(None))),
    ))


def test_tree_spans():
    tree = parse("add(mul(@0,2),@1)")
    assert (tree.start, tree.end) == (0, 17)
    inner = tree.args[0]
    assert (inner.start, inner.end) == (4, 13)
    assert (tree.args[1].start, tree.args[1].end) == (14, 16)


def test_constants_distinguish_int_float_and_bool():
    assert Constant(1) != Constant(1.0)
    assert Constant(1) != Constant(True)
    assert Constant(float("nan")) == Constant(float("nan"))
    assert parse("2") == Constant(2) and parse("2.0") == Constant(2.0)


def test_a_bare_input_or_literal_is_an_expression():
    assert parse("@3") == InputRef(3)
    assert parse("-inf") == Constant(float("-inf"))


def test_empty_list_and_nested_lists():
    assert parse("[]") == List(())
    assert parse("[[1],[]]") == List((List((Constant(1),)), List(())))


def test_format_node_round_trips_pnnx_text():
    text = "add(add(max(@0,@1),min(@0,mul(@1,1.5))),[size(@0,-1),-1])"
    assert format_node(parse(text)) == text
    assert str(parse("torch.long(@0)")) == "torch.long(@0)"


def test_walk_visits_parents_first():
    tree = parse("add(mul(@0,@1),@2)")
    assert [str(n) for n in walk(tree)] == ["add(mul(@0,@1),@2)", "mul(@0,@1)", "@0", "@1", "@2"]


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_every_supported_function_parses_with_its_arity(name):
    spec = FUNCTIONS[name]
    args = ",".join(f"@{i}" for i in range(spec.max_args))
    assert parse(f"{name}({args})") == Call(name, tuple(InputRef(i) for i in range(spec.max_args)))


def test_parser_and_evaluator_share_one_table():
    assert set(FUNCTIONS) == set(IMPLEMENTATIONS)
    assert {"erf", "torch.bool", "logaddexp", "rshift", "size", "int"} <= set(FUNCTIONS)


@pytest.mark.parametrize("text, position, words", [
    ("", 0, "empty expression"),
    ("   ", 0, "empty expression"),
    ("foo(@0)", 0, "unknown function 'foo'"),
    ("add(@0,sqr(@1))", 7, "unknown function 'sqr' (did you mean 'sqrt'?)"),
    ("add(@0,x)", 7, "unknown name 'x'"),
    ("add(@0)", 0, "function 'add' takes 2 arguments but 1 was given"),
    ("add(@0,@1,@2)", 0, "takes 2 arguments but 3 were given"),
    ("neg()", 0, "takes 1 argument but 0 were given"),
    ("size(@0,1,2)", 0, "takes 1 to 2 arguments"),
    ("add(@0,@1", 9, "the '(' at position 3 is never closed"),
    ("add(mul(@0,@1),@2", 17, "never closed"),
    ("[1,2", 4, "the '[' at position 0 is never closed"),
    ("add(@0,@1))", 10, "unexpected ')' after the end of the expression"),
    ("@0 @1", 3, "unexpected '@1' after the end"),
    ("@0,@1", 2, "unexpected ',' after the end"),
    ("add(@0,,@1)", 7, "expected a value but found ','"),
    ("add(@0,@1,)", 10, "expected a value but found ')'"),
    ("add(,@0,@1)", 4, "expected a value but found ','"),
    ("[1,2)", 4, "expected ',' or ']' but found ')'"),
    ("add(@0 @1)", 7, "expected ',' or ')' but found '@1'"),
    (")", 0, "expected a value but found ')'"),
    ("add", 3, "must be followed by '(' but found the end"),
    ("mul[@0,2]", 3, "must be followed by '('"),
])
def test_parse_errors_name_the_position(text, position, words):
    error = error_of(text)
    assert error.position == position, str(error)
    assert words in str(error)
    assert error.expression == text


def test_python_code_is_rejected_as_a_parse_error():
    error = error_of("__import__('os').system('ls')")
    assert "unknown function '__import__'" in str(error)
    assert error.position == 0


@pytest.mark.parametrize("text", [
    "add(@0,1);import os", "lambda: 0", "add(@0,'1')", "@0.size(0)", "add(@0,1)#", "getattr(@0,1)",
])
def test_other_hostile_text_is_rejected(text):
    error_of(text)


def test_deep_nesting_is_refused_quickly_without_recursion_error():
    depth = 10_000
    text = "neg(" * depth + "@0" + ")" * depth
    with cpu_time() as spent:
        error = error_of(text)
    assert spent.seconds < 1.0
    assert "nested too deeply" in str(error)
    assert error.position == 4 * MAX_NESTING_DEPTH


def test_deep_list_nesting_is_refused_too():
    text = "[" * 5000 + "]" * 5000
    assert "nested too deeply" in str(error_of(text))


def test_nesting_up_to_the_limit_is_accepted_and_evaluated():
    depth = MAX_NESTING_DEPTH
    text = "neg(" * depth + "@0" + ")" * depth
    expression = compile_expression(text)
    assert len(expression.program) == depth + 1
    assert expression.evaluate([3]) == 3  # an even number of negations


def test_a_million_tokens_are_refused_by_the_length_limit_quickly():
    text = "[" + ",".join(["1"] * 500_000) + "]"  # 1,000,001 tokens
    with cpu_time() as spent:
        error = error_of(text)
    assert spent.seconds < 2.0
    assert "too long" in str(error) and str(MAX_EXPRESSION_LENGTH) in str(error)


def test_the_longest_accepted_expression_compiles_quickly():
    items = (MAX_EXPRESSION_LENGTH - 2) // 2
    text = "[" + ",".join(["7"] * items) + "]"
    assert len(text) <= MAX_EXPRESSION_LENGTH
    with cpu_time() as spent:
        expression = compile_expression(text)
        value = expression.evaluate([])
    assert spent.seconds < 2.0
    assert len(value) == items and value[-1] == 7


def test_long_flat_chain_compiles():
    text = "add(" * 400 + "@0" + ",1)" * 400
    assert compile_expression(text).evaluate([0]) == 400


# --------------------------------------------------------------------------- reverse Polish


def test_reverse_polish_order_of_the_seed_example():
    program = to_reverse_polish(parse("add(mul(@0,@1),add(@2,@3))"))
    assert format_program(program) == "@0 @1 mul/2 @2 @3 add/2 add/2"
    assert program[2] == Instruction(OpCode.CALL, "mul", 2, 0 + 4)
    assert program[-1].count == 2 and program[-1].operand == "add"


def test_reverse_polish_of_lists_and_constants():
    program = to_reverse_polish(parse("[size(@0,0),-1,16]"))
    assert [(i.opcode, i.operand, i.count) for i in program] == [
        (OpCode.INPUT, 0, 0), (OpCode.CONST, 0, 0), (OpCode.CALL, "size", 2),
        (OpCode.CONST, -1, 0), (OpCode.CONST, 16, 0), (OpCode.LIST, None, 3)]
    assert format_program(program) == "@0 0 size/2 -1 16 [3]"


def test_reverse_polish_positions_point_into_the_text():
    text = "sub(@0,sqrt(@1))"
    positions = {str(i): i.position for i in to_reverse_polish(parse(text))}
    assert positions == {"@0": 4, "@1": 12, "sqrt/1": 7, "sub/2": 0}


def test_reverse_polish_of_a_deep_tree_needs_no_recursion():
    tree = InputRef(0)
    for _ in range(50_000):  # far deeper than the parser allows
        tree = Call("neg", (tree,))
    program = to_reverse_polish(tree)
    assert len(program) == 50_001 and program[0].opcode is OpCode.INPUT


def test_reverse_polish_rejects_foreign_objects():
    with pytest.raises(ExpressionError):
        to_reverse_polish("add(@0,1)")  # type: ignore[arg-type]


def test_compiled_expression_attributes():
    expression = compile_expression("add(@2,mul(@0,@0))")
    assert expression.num_inputs == 3
    assert expression.tree == parse("add(@2,mul(@0,@0))")
    assert format_program(expression.program) == "@2 @0 @0 mul/2 add/2"
    assert compile_expression("[1,2]").num_inputs == 0
    assert repr(expression) == "Expression('add(@2,mul(@0,@0))')"


# --------------------------------------------------------------------------- complex literals


@pytest.mark.parametrize("text, value", [
    ("1.000000e+00+2.000000e+00j", 1 + 2j), ("-1.000000e+00-2.500000e-01j", -1 - 0.25j),
    ("0.000000e+00+1.000000e+00j", 1j), ("1.5-0.0j", complex(1.5, -0.0)), ("2+3j", 2 + 3j),
    ("inf-infj", complex(math.inf, -math.inf)), ("-inf+5.000000e-01j", complex(-math.inf, 0.5)),
])
def test_complex_literals_as_pnnx_prints_them(text, value):
    # fuse_expression.cpp: sprintf("%e%+ej", real, imag): one token, sign always written
    (token, end) = tokenize(text)
    assert token.type is T.COMPLEX and token.text == text and end.type is T.END
    assert token.value == value and math.copysign(1, token.value.imag) == math.copysign(1, value.imag)


@pytest.mark.parametrize("text, real, imag", [
    ("nan+nanj", math.nan, math.nan), ("-nan-nanj", math.nan, math.nan),
    ("1.000000e+00+nanj", 1.0, math.nan), ("-nan+0.000000e+00j", math.nan, 0.0),
])
def test_complex_literals_with_nan_parts(text, real, imag):
    # glibc prints a NaN as nan or -nan, and %+e as +nan or -nan
    (token, _) = tokenize(text)
    assert token.type is T.COMPLEX
    for got, expected in ((token.value.real, real), (token.value.imag, imag)):
        assert got == expected or (math.isnan(got) and math.isnan(expected))
    assert Constant(token.value) == Constant(complex(real, imag))  # nan parts compare equal


def test_complex_literal_in_an_expression_round_trips():
    tree = parse("mul(@0,1.000000e+00-2.000000e+00j)")
    assert tree == Call("mul", (InputRef(0), Constant(1 - 2j)))
    assert format_node(tree) == "mul(@0,1.0-2.0j)"
    assert parse(format_node(tree)) == tree
    assert Constant(1 + 0j) != Constant(1.0) and Constant(1j) == Constant(complex(0, 1))
    assert format_program(to_reverse_polish(tree)) == "@0 1.0-2.0j mul/2"


# --------------------------------------------------------------------------- pnnx's token order


@pytest.mark.parametrize("written, meant", [
    # what the pnnx binary wrote for torch.expm1 / torch.log1p (eval_expression.cpp knows neither)
    ("mul(expm1,@0),2", "mul(expm1(@0),2)"),
    ("log1p,abs(@0)", "log1p(abs(@0))"),
    ("expm1,@0", "expm1(@0)"),
    ("add(expm1,@0),mul(log1p,abs(@0)),@1", "add(expm1(@0),mul(log1p(abs(@0)),@1))"),
    ("add(mul(expm1,@0),2),log1p,abs(@0)", "add(mul(expm1(@0),2),log1p(abs(@0)))"),
    ("add(add(add(erf(@0),expm1),@1),log1p),abs(@1),logaddexp(@0,@1)",
     "add(add(add(erf(@0),expm1(@1)),log1p(abs(@1))),logaddexp(@0,@1))"),
    ("mul(expm1,@0),1.000000e+00+2.000000e+00j", "mul(expm1(@0),1.0+2.0j)"),
    # lists take every value left; size takes one argument when it is the last value
    ("[expm1,@0,2]", "[expm1(@0),2]"),
    ("[log1p,@0,size(@0)]", "[log1p(@0),size(@0)]"),
    ("add(size,@0,0),expm1(@0)", "add(size(@0,0),expm1(@0))"),
])
def test_the_pnnx_binary_s_misplaced_brackets_are_read_in_token_order(written, meant):
    assert parse(written) == parse(meant)
    assert format_node(parse(written)) == meant
    assert format_program(compile_expression(written).program) == \
        format_program(compile_expression(meant).program)


def test_token_order_reading_keeps_positions_of_the_names():
    tree = parse("mul(expm1,@0),2")
    assert (tree.start, tree.args[0].start, tree.args[0].args[0].start, tree.args[1].start) == (0, 4, 10, 14)


@pytest.mark.parametrize("text, words", [
    ("add(expm1,@0)", "function 'expm1' must be followed by '('"),      # add lacks an argument
    ("neg,@0,@1", "function 'neg' must be followed by '('"),            # a value left over
    ("mul(expm1,@0),2)", "function 'expm1' must be followed by '('"),   # brackets do not balance
    ("mul(expm1,@0,2", "function 'expm1' must be followed by '('"),
    ("mul(lgamma,@0),2", "unknown name 'lgamma'"),                      # not a function of ours
    ("mul(expm1,@0),'x'", "function 'expm1' must be followed by '('"),  # the lexer refuses the rest
    ("mul(expm1(@0),2", "never closed"),                                # no bare name
])
def test_texts_without_pnnx_s_mark_or_unreadable_keep_the_grammar_s_error(text, words):
    assert words in str(error_of(text))


def test_token_order_reading_is_bounded_in_depth_too():
    text = "neg," * (MAX_NESTING_DEPTH + 1) + "@0"
    assert "nested too deeply" in str(error_of(text))
    assert compile_expression("neg," * MAX_NESTING_DEPTH + "@0").evaluate([5]) == 5
