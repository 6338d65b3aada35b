"""Hostile model files through the whole ``kuiperinfer.load`` path.

tests/pnnx/test_fuzz.py fuzzes the reader alone (character edits, random bytes, damaged
archives). Here every mutation goes through reading, graph init, the optimiser, layer
creation and a run: line edits (deleted, duplicated, swapped, truncated, garbage tokens,
non-UTF-8, wrong counts), operand rewiring (dangling names, duplicates, self-consumption),
wrong parameter types, archive damage, expressions and one-operator files for every
registered layer type. Every case must end within a time limit either in a working graph
or in a :class:`KuiperError` that names the file, a line or an operator; building a layer
must never fail with a raw Python exception (the registry's wrapper is a safety net, not
a way to validate parameters).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from batches import assert_same_at_every_batch
from cpu_time import cpu_time
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kuiperinfer
from kuiperinfer.errors import (
    BinArchiveError,
    ExpressionError,
    GraphError,
    InferError,
    InputError,
    KuiperError,
    LayerCreateError,
    ModelFormatError,
    OperatorError,
    ParamSyntaxError,
    UnknownOperatorError,
)
from kuiperinfer.expression import FUNCTIONS, compile_expression
from kuiperinfer.pnnx import StoreZipWriter, load_graph
from kuiperinfer.runtime.graph import RuntimeGraph
from kuiperinfer.runtime.registry import LayerRegisterer

TIME_LIMIT = 4.0
"""CPU seconds one case may take in the calling thread, to catch runaway work: most take
milliseconds, but a mutated ResNet-18 loads and runs in 0.65-1.2 s (its 47 MB of weights
packed, Winograd's transforms made) and took 2.05 s once on a busy CI machine."""

# A small pnnx export (conv, relu, pool, expression, cat, slice, grouped conv, flatten,
# linear, split, softmax, sigmoid, tuple), as pnnx 20261020 wrote it.
PARAM = """7767517
15 15
pnnx.Input               pnnx_input_0             0 1 0 #0=(1,3,8,8)f32
nn.Conv2d                convbn2d_0               1 1 0 1 bias=True dilation=(1,1) groups=1 in_channels=3 kernel_size=(3,3) out_channels=4 padding=(1,1) padding_mode=zeros stride=(1,1) @bias=(4)f32 @weight=(4,3,3,3)f32 $input=0 #0=(1,3,8,8)f32 #1=(1,4,8,8)f32
F.relu                   F.relu_6                 1 1 1 2 $input=1 #1=(1,4,8,8)f32 #2=(1,4,8,8)f32
F.max_pool2d             F.max_pool2d_9           1 1 2 3 ceil_mode=False dilation=(1,1) kernel_size=(2,2) padding=(0,0) return_indices=False stride=None $input=2 #2=(1,4,8,8)f32 #3=(1,4,4,4)f32
pnnx.Expression          pnnx_expr_11             1 1 3 4 expr=add(mul(@0,0.5),1) #3=(1,4,4,4)f32 #4=(1,4,4,4)f32
torch.cat                torch.cat_1              2 1 3 4 5 dim=1 #3=(1,4,4,4)f32 #4=(1,4,4,4)f32 #5=(1,8,4,4)f32
Tensor.slice             Tensor.slice_5           1 1 5 6 dim=1 end=4 start=0 step=1 $input=5 #5=(1,8,4,4)f32 #6=(1,4,4,4)f32
nn.Conv2d                c2                       1 1 6 7 bias=True dilation=(1,1) groups=2 in_channels=4 kernel_size=(3,3) out_channels=4 padding=(0,0) padding_mode=zeros stride=(2,2) @bias=(4)f32 @weight=(4,2,3,3)f32 #6=(1,4,4,4)f32 #7=(1,4,1,1)f32
torch.flatten            torch.flatten_2          1 1 7 8 end_dim=-1 start_dim=1 $input=7 #7=(1,4,1,1)f32 #8=(1,4)f32
nn.Linear                fc                       1 1 8 9 bias=True in_features=4 out_features=5 @bias=(5)f32 @weight=(5,4)f32 #8=(1,4)f32 #9=(1,5)f32
torch.split              torch.split_3            1 2 9 10 11 dim=1 split_size_or_sections=(2,3) $tensor=9 #9=(1,5)f32 #10=(1,2)f32 #11=(1,3)f32
F.softmax                F.softmax_8              1 1 10 12 dim=1 $input=10 #10=(1,2)f32 #12=(1,2)f32
F.sigmoid                F.sigmoid_7              1 1 11 13 $input=11 #11=(1,3)f32 #13=(1,3)f32
prim::TupleConstruct     pnnx_48                  2 1 12 13 14 #12=(1,2)f32 #13=(1,3)f32
pnnx.Output              pnnx_output_0            1 0 14
"""
LINES = PARAM.splitlines()
OP_LINES = range(2, len(LINES))
WEIGHTS = {"convbn2d_0.bias": (4,), "convbn2d_0.weight": (4, 3, 3, 3), "c2.bias": (4,),
           "c2.weight": (4, 2, 3, 3), "fc.bias": (5,), "fc.weight": (5, 4)}
INPUT = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)

# Values of every pnnx parameter type, and words and sizes that are wrong almost anywhere.
VALUES = ["None", "True", "False", "0", "1", "-1", "3", "-7", "2147483647", "-2147483648",
          "99999999999999999999", "1.5", "-0.0", "1e30", "nan", "inf", "-inf", "abc", "torch.float",
          "(1,2)", "(0,0)", "(-1,-1)", "(1,2,3)", "(1.5,2.5)", "(a,b)", "()", "[]", "(2147483647)",
          "(1,1,1,1)", "(-3,-3,-3,-3)", "%x", "1.0+2.0j", "nearest", "zeros", "reflect", "ij,jk->ik",
          "add(@0,@1)", "size(@0,0)"]
GARBAGE = VALUES + ["=", "==", "@", "#", "$", "@w=", "#0=", "$=", "#0=(1,3,8,8)f64", "#1=(?,?)f32",
                    "@weight=(1)f32", "@weight=(9999999,9999999,9999)f32", "#5=(0)f32", "x=(1,", "\x00",
                    "é", "1 1", "7767517"]


def weights_archive(path: Path, entries: dict[str, bytes] | None = None) -> None:
    """The model's archive: float32 weights of the declared shapes (or ``entries`` as given)."""
    rng = np.random.default_rng(1)
    if entries is None:
        entries = {name: rng.standard_normal(shape).astype(np.float32).tobytes()
                   for name, shape in WEIGHTS.items()}
    with StoreZipWriter(path) as writer:
        for name, data in entries.items():
            writer.write_file(name, data)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("hostile")
    weights_archive(directory / "m.pnnx.bin")
    return directory


def write_param(directory: Path, text: str | bytes) -> Path:
    path = directory / "m.pnnx.param"
    path.write_bytes(text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text)
    return path


def names_where(error: KuiperError, text: str) -> bool:
    """Does the message say where: a file, or an operator of the model?"""
    message = str(error)
    if ".pnnx.param" in message or ".pnnx.bin" in message:
        return True
    if isinstance(error, OperatorError) and error.op_name is not None:
        return error.op_name in text and f"operator {error.op_name!r}" in message
    return False


def load_and_run(param_path: Path, text: str, *inputs: np.ndarray) -> KuiperError | None:
    """Load and run ``param_path``; the error raised (None on success), checked for quality.

    Fails the test on a raw Python exception, on a KuiperError that does not say where,
    on a layer that did not validate its parameters, and on a case slower than TIME_LIMIT.
    A model that runs must then give the one-thread results at every batch size with
    several threads (:func:`batches.assert_same_at_every_batch`).
    """
    with cpu_time() as spent:
        error = None
        try:
            graph = kuiperinfer.load(param_path)
            try:
                graph.run(*(inputs or (INPUT,)))
            except KuiperError as e:
                assert (isinstance(e, InputError) and e.input_name) or \
                    (isinstance(e, OperatorError) and e.op_name is not None), f"run: {e!r}"
                error = e
        except KuiperError as e:
            assert names_where(e, text), f"error does not say where: {e}"
            assert not unvalidated(e), f"a layer did not validate its parameters: {e}"
            error = e
    assert spent.seconds < TIME_LIMIT, f"{spent.seconds:.2f} s"
    if error is None:
        assert_same_at_every_batch(param_path)
    return error


def unvalidated(error: KuiperError) -> bool:
    """A build-time error that is only the registry's wrapper around a raw exception."""
    return isinstance(error, LayerCreateError) and error.__cause__ is not None \
        and not isinstance(error.__cause__, KuiperError)


def test_the_sample_model_loads_and_runs(workdir):
    graph = kuiperinfer.load(write_param(workdir, PARAM))
    softmax, sigmoid = graph(INPUT)
    assert softmax.shape == (2, 2) and sigmoid.shape == (2, 3)
    np.testing.assert_allclose(softmax.sum(axis=1), 1, rtol=1e-6)


# ------------------------------------------------------------------ .param text mutations

def _apply(lines: list[str], edit: tuple) -> list[str]:
    kind, i, j, token = edit
    lines = list(lines)
    i = OP_LINES.start + i % (len(lines) - OP_LINES.start) if len(lines) > OP_LINES.start else 0
    tokens = lines[i].split() if i < len(lines) else []
    if kind == "delete line" and i < len(lines):
        del lines[i]
    elif kind == "duplicate line" and i < len(lines):
        lines.insert(j % (len(lines) + 1), lines[i])
    elif kind == "swap lines" and i < len(lines):
        k = j % len(lines)
        lines[i], lines[k] = lines[k], lines[i]
    elif kind == "truncate line" and i < len(lines):
        lines[i] = lines[i][:j % (len(lines[i]) + 1)]
    elif kind == "replace token" and tokens:
        tokens[j % len(tokens)] = token
        lines[i] = " ".join(tokens)
    elif kind == "insert token":
        tokens.insert(j % (len(tokens) + 1), token)
        lines[i:i + 1] = [" ".join(tokens)]
    elif kind == "rewire operand" and len(tokens) > 4:
        # an operand name becomes another name: dangling, duplicated, self-consumed or cyclic
        k = 4 + j % (len(tokens) - 4)
        if "=" not in tokens[k]:
            tokens[k] = token if token.isdigit() else str(j % 17)
        lines[i] = " ".join(tokens)
    elif kind == "counts":
        lines[1] = f"{j % 20} {i % 20}"
    return lines


EDITS = st.tuples(
    st.sampled_from(["delete line", "duplicate line", "swap lines", "truncate line", "replace token",
                     "insert token", "rewire operand", "counts"]),
    st.integers(0, 1000), st.integers(0, 1000), st.sampled_from(GARBAGE))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(EDITS, min_size=1, max_size=3), fix_counts=st.booleans())
def test_mutated_param_text_loads_or_fails_cleanly(workdir, edits, fix_counts):
    lines = LINES
    for edit in edits:
        lines = _apply(lines, edit)
    if fix_counts and len(lines) > 2:  # get past the count check to reach the deeper stages
        ops = [line for line in lines[2:] if line.split()]
        lines = lines[:1] + [f"{len(ops)} {sum(_outputs(line) for line in ops)}"] + lines[2:]
    text = "\n".join(lines) + "\n"
    load_and_run(write_param(workdir, text), text)


def _outputs(line: str) -> int:
    tokens = line.split()
    return int(tokens[3]) if len(tokens) > 3 and tokens[3].isdigit() else 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, len(PARAM.encode())), junk=st.binary(max_size=8))
def test_truncated_files_and_non_utf8_bytes(workdir, cut, junk):
    data = PARAM.encode()[:cut] + junk
    error = load_and_run(write_param(workdir, data), PARAM)
    if error is not None and cut < len(PARAM.encode()) - 1:
        assert isinstance(error, (ModelFormatError, GraphError, LayerCreateError))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(line=st.sampled_from(list(OP_LINES)), which=st.integers(0, 100), value=st.sampled_from(VALUES))
def test_wrong_parameter_types_in_the_model(workdir, line, which, value):
    tokens = LINES[line].split()
    params = [i for i, t in enumerate(tokens) if "=" in t and t[0] not in "@$#"]
    if params:
        i = params[which % len(params)]
        tokens[i] = tokens[i].split("=", 1)[0] + "=" + value
    text = "\n".join(LINES[:line] + [" ".join(tokens)] + LINES[line + 1:]) + "\n"
    load_and_run(write_param(workdir, text), text)


# ------------------------------------------------------------------ explicit structural cases

def _replace(old: str, new: str) -> str:
    assert old in PARAM
    return PARAM.replace(old, new, 1)


@pytest.mark.parametrize("text, error, needle", [
    (_replace("F.relu_6                 1 1 1 2", "F.relu_6                 1 1 2 2"),
     ParamSyntaxError, "before any operator produces it"),                       # consumes its own output
    (_replace("F.relu_6                 1 1 1 2", "F.relu_6                 1 1 13 2"),
     ParamSyntaxError, "before any operator produces it"),                       # cycle through a later op
    (_replace("F.relu_6                 1 1 1 2", "F.relu_6                 1 1 1 1"),
     ParamSyntaxError, "produced twice"),
    (_replace("F.relu_6                 1 1 1 2", "F.relu_6                 1 1 missing 2"),
     ParamSyntaxError, "'missing'"),
    (_replace("c2                       1 1 6 7", "fc                       1 1 6 7"),
     ParamSyntaxError, "duplicate operator name"),
    (_replace("15 15", "15 99"), ParamSyntaxError, "declares 99 operands"),
    (_replace("15 15", "16 15"), ParamSyntaxError, "declares 16 operators"),
    (_replace("#1=(1,4,8,8)f32 #2=", "#1=(1,4,9,8)f32 #2="), ParamSyntaxError, "operand '1'"),
    (_replace("@weight=(5,4)f32", "@weight=(5,5)f32"), BinArchiveError, "fc.weight"),
    (_replace("@weight=(5,4)f32", "@weight=(5,4)f16"), BinArchiveError, "fc.weight"),
    (_replace("in_features=4 out_features=5 @bias=(5)f32 @weight=(5,4)f32",
              "in_features=4 out_features=5 @bias=(5)f32 @weight=(5,4)f32 @extra=(3)f32"),
     BinArchiveError, "'fc.extra' is missing"),
    (_replace("@weight=(5,4)f32", "@weight=(99999,99999,99999)f32"), ParamSyntaxError, "exceeds the limit"),
    (_replace("#0=(1,3,8,8)f32 #1=", "#0=(1,3,8,8)f32 #1=(99999,99999,99999,99999)f32 #1="),
     ParamSyntaxError, "exceeds the limit"),
    (_replace("F.relu  ", "F.nosuch"), LayerCreateError, "closest registered types"),
    (_replace("pnnx.Output              pnnx_output_0            1 0 14\n", ""), ParamSyntaxError, "declares 15"),
])
def test_structural_damage_is_reported_precisely(tmp_path, text, error, needle):
    weights_archive(tmp_path / "m.pnnx.bin")
    path = write_param(tmp_path, text)
    with pytest.raises(error, match=needle.replace("(", r"\(")) as info:
        kuiperinfer.load(path)
    assert names_where(info.value, text)


def test_a_graph_without_output_is_refused(tmp_path):
    text = "7767517\n2 2\npnnx.Input in 0 1 x\nF.relu r 1 1 x y\n"
    with pytest.raises(GraphError, match="no pnnx.Output"):
        kuiperinfer.load(write_param(tmp_path, text))


def test_a_cycle_made_in_memory_is_a_graph_error(tmp_path):
    """The text cannot hold a cycle (inputs must be produced above); a graph built in memory can."""
    text = ("7767517\n4 3\npnnx.Input in 0 1 x\nF.relu a 1 1 x y\nF.relu b 1 1 y z\n"
            "pnnx.Output out 1 0 z\n")
    pnnx_graph = load_graph(write_param(tmp_path, text))
    a, b = pnnx_graph.ops[1], pnnx_graph.ops[2]
    a.inputs[0] = b.outputs[0]           # a reads z, which b makes from a's y
    with pytest.raises(GraphError, match="'z' is not produced by any earlier operator"):
        RuntimeGraph().init(pnnx_graph)
    graph = RuntimeGraph(write_param(tmp_path, text))
    graph.init()
    a = next(op for op in graph.operators if op.name == "a")
    x, z = graph.operands["x"], graph.operands["z"]
    a.input_operands_seq[0] = z  # the same loop, made after init, with consistent links
    x.consumers.remove(a)
    z.consumers.append(a)
    with pytest.raises(GraphError, match="cycle through operator"):
        graph.build()


def test_declared_size_limit_is_configurable_and_checked_before_allocation(tmp_path):
    text = _replace("@weight=(5,4)f32", "@weight=(5,4000)f32")
    path = write_param(tmp_path, text)
    with pytest.raises(ParamSyntaxError, match="max_tensor_bytes"):
        load_graph(path, max_tensor_bytes=1000)
    # a declared 4 EiB tensor is refused at once, by the default limit
    huge = _replace("@weight=(5,4)f32", "@weight=(1024,1024,1024,1024,1024,1024)f32")
    with cpu_time() as spent:
        with pytest.raises(ParamSyntaxError, match="exceeds the limit"):
            kuiperinfer.load(write_param(tmp_path, huge))
    assert spent.seconds < TIME_LIMIT


# ------------------------------------------------------------------ the weight archive

ARCHIVE_EDITS = ["drop entry", "shrink entry", "grow entry", "rename entry", "duplicate entry",
                 "not a zip", "truncate", "empty", "flip bytes"]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edit=st.sampled_from(ARCHIVE_EDITS), which=st.sampled_from(sorted(WEIGHTS)), at=st.integers(0, 10**6),
       byte=st.integers(0, 255))
def test_damaged_archive_loads_or_fails_cleanly(tmp_path_factory, edit, which, at, byte):
    directory = tmp_path_factory.mktemp("bin")
    write_param(directory, PARAM)
    bin_path = directory / "m.pnnx.bin"
    entries = {name: np.ones(shape, np.float32).tobytes() for name, shape in WEIGHTS.items()}
    if edit == "drop entry":
        del entries[which]
    elif edit == "shrink entry":
        entries[which] = entries[which][:at % len(entries[which])]
    elif edit == "grow entry":
        entries[which] += b"\0" * (1 + at % 9)
    elif edit == "rename entry":
        entries[which.upper()] = entries.pop(which)
    if edit == "duplicate entry":  # the writer refuses duplicates: write the zip by hand
        import zipfile
        with pytest.warns(UserWarning), zipfile.ZipFile(bin_path, "w") as archive:
            for name, data in [*entries.items(), (which, entries[which])]:
                archive.writestr(name, data)
    else:
        weights_archive(bin_path, entries)
    raw = bin_path.read_bytes()
    if edit == "not a zip":
        bin_path.write_bytes(PARAM.encode())
    elif edit == "truncate":
        bin_path.write_bytes(raw[:at % len(raw)])
    elif edit == "empty":
        bin_path.write_bytes(b"")
    elif edit == "flip bytes":
        damaged = bytearray(raw)
        damaged[at % len(raw)] = byte
        bin_path.write_bytes(bytes(damaged))
    error = load_and_run(directory / "m.pnnx.param", PARAM)
    if edit not in ("flip bytes", "duplicate entry"):
        assert isinstance(error, BinArchiveError), error
        assert str(bin_path) in str(error)


def test_missing_archive_names_the_file_and_first_entry(tmp_path):
    path = write_param(tmp_path, PARAM)
    with pytest.raises(BinArchiveError, match=r"m\.pnnx\.bin.*'convbn2d_0\.bias'"):
        kuiperinfer.load(path)


# ------------------------------------------------------------------ expressions

FUNCTION_NAMES = sorted(FUNCTIONS)
UNKNOWN = ["__import__", "eval", "exec", "open", "getattr", "os.system", "lambda", "torch.load", "foo"]


@st.composite
def expressions(draw, depth: int = 0) -> str:
    """Mostly well-formed pnnx expressions with wrong arities, unknown names and odd literals."""
    leaf = st.sampled_from(["@0", "@1", "@9", "@", "1", "-1", "0.5", "1e-5", "inf", "nan", "True", "None",
                            "2147483647", "99999999999999999999", "'x'", "1.5.3", "1+2j", ""])
    if depth > 3 or draw(st.integers(0, 2)) == 0:
        return draw(leaf)
    name = draw(st.sampled_from(FUNCTION_NAMES + UNKNOWN + ["["]))
    args = draw(st.lists(expressions(depth + 1), min_size=0, max_size=3))
    if name == "[":
        return "[" + ",".join(args) + "]"
    return f"{name}({','.join(args)})"


def expression_model(expr: str) -> str:
    return _replace("expr=add(mul(@0,0.5),1)", "expr=" + expr)


def _damage(expr: str, cut: int, extra: str) -> str:
    return expr[:cut % (len(expr) + 1)] + extra + expr[cut % (len(expr) + 1):]


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(expr=expressions(), cut=st.integers(0, 200), extra=st.sampled_from(["", "", "(", ")", ",", "@0", " ", "]"]))
def test_mutated_expressions_load_or_fail_cleanly(workdir, expr, cut, extra):
    expr = _damage(expr, cut, extra) if extra else expr
    if not expr or " " in expr:
        expr = f"add({expr.replace(' ', '')},@0)"
    text = expression_model(expr)
    error = load_and_run(write_param(workdir, text), text)
    if isinstance(error, LayerCreateError) and error.op_name == "pnnx_expr_11":
        assert "expression" in error.reason


@pytest.mark.parametrize("expr, needle", [
    ("__import__('os').system('touch>pwned')", "unknown function '__import__'"),
    ("eval(@0)", "unknown function 'eval'"),
    ("getattr(@0,@0)", "unknown function 'getattr'"),
    ("add(@0,@0", "never closed"),
    ("add(@0,@0))", "after the end"),
    ("add(@0)", "takes 2 arguments"),
    ("sqrt(@0,@0)", "takes 1 argument"),
    ("add(@0,@5)", "uses 6 inputs"),
    ("mul(@0,'x')", "unexpected character"),
    ("add(@0,1.5.3)", "malformed number"),
    ("neg(" * 10_000 + "@0" + ")" * 10_000, "nested too deeply"),
    ("[" * 10_000 + "]" * 10_000, "nested too deeply"),
    ("add(@0," * 400_000 + "1" + ")" * 400_000, "too long"),
])
def test_hostile_expressions_are_parse_errors(workdir, tmp_path, expr, needle):
    text = expression_model(expr)
    with cpu_time() as spent:
        with pytest.raises(LayerCreateError, match=needle.replace("(", r"\(")) as info:
            kuiperinfer.load(write_param(workdir, text))
    assert spent.seconds < TIME_LIMIT
    assert info.value.op_name == "pnnx_expr_11"
    assert info.value.__cause__ is None or isinstance(info.value.__cause__, ExpressionError)
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()


def test_a_million_tokens_fail_fast():
    """An expression of a million tokens is refused by length before any parsing."""
    expr = ",".join(["@0"] * 500_000)
    with cpu_time() as spent:
        with pytest.raises(ExpressionError, match="too long"):
            compile_expression(f"[{expr}]")
    assert spent.seconds < TIME_LIMIT


def test_a_million_parameters_on_one_line_are_refused_before_parsing(tmp_path):
    tokens = " ".join(f"k{i}=1" for i in range(1_000_000))
    text = f"7767517\n3 2\npnnx.Input in 0 1 x\nF.relu r 1 1 x y {tokens}\npnnx.Output out 1 0 y\n"
    with cpu_time() as spent:
        with pytest.raises(ParamSyntaxError, match=r"m\.pnnx\.param:4: 1000006 fields on one line"):
            kuiperinfer.load(write_param(tmp_path, text))
    assert spent.seconds < TIME_LIMIT


# ------------------------------------------------------------------ every layer, wrong parameter types

LAYER_TYPES = LayerRegisterer.layer_types()
PARAM_KEYS = ["dim", "dims", "kernel_size", "stride", "padding", "dilation", "groups", "in_channels",
              "out_channels", "bias", "eps", "num_features", "affine", "in_features", "out_features",
              "start_dim", "end_dim", "shape", "size", "scale_factor", "mode", "align_corners",
              "negative_slope", "min_val", "max_val", "min", "max", "alpha", "beta", "lambd", "threshold",
              "value", "approximate", "upscale_factor", "downscale_factor", "output_size", "ceil_mode",
              "count_include_pad", "divisor_override", "return_indices", "split_size_or_sections",
              "sections", "indices", "start", "end", "step", "index", "keepdim", "p", "num_groups",
              "normalized_shape", "elementwise_affine", "pad", "padding_mode", "output_padding",
              "embed_dim", "num_heads", "batch_first", "sizes", "repeats", "shifts", "expr", "equation",
              "unbiased", "correction", "k", "largest", "sorted", "dtype", "unflattened_size", "chunks",
              "num_embeddings", "embedding_dim", "padding_idx", "fill_value", "lower", "upper",
              "recompute_scale_factor", "num_parameters", "exponent", "is_causal", "dropout_p", "scale",
              "dim0", "dim1", "other", "beta", "alpha", "correction", "largest"]
INPUT_SHAPES = {"(1,3,8,8)f32": (2, 3, 8, 8), "(1,4)f32": (2, 4), "(1,3,8)f32": (2, 3, 8), "(4)f32": (4,),
                "(1,3,8,8)i64": (2, 3, 8, 8)}
ATTRS = ["@weight=(4,3,3,3)f32", "@weight=(4)f32", "@bias=(4)f32", "@bias=(3)f32", "@running_mean=(3)f32",
         "@running_var=(3)f32", "@weight=(5,4)f32", "@data=(2,2)i64", "@in_proj_weight=(9,3)f32"]


def one_operator_model(op_type: str, params: dict[str, str], shapes: list[str], attrs: list[str]) -> str:
    """pnnx.Input(s) -> op_type -> pnnx.Output, in pnnx's text form."""
    inputs = [f"in{i}" for i in range(len(shapes))]
    lines = [f"pnnx.Input {name} 0 1 {name} #{name}={shape}" for name, shape in zip(inputs, shapes)]
    tokens = [op_type, "op", str(len(inputs)), "1", *inputs, "out"]
    tokens += [f"{key}={value}" for key, value in sorted(params.items())]
    tokens += sorted(dict((a.split("=")[0], a) for a in attrs).values())
    tokens += [f"#{name}={shape}" for name, shape in zip(inputs, shapes)]
    lines += [" ".join(tokens), "pnnx.Output output 1 0 out"]
    return f"7767517\n{len(lines)} {len(inputs) + 1}\n" + "\n".join(lines) + "\n"


def build_one_operator(directory: Path, text: str, shapes: list[str]) -> None:
    """Write ``text`` (and zero weights for its attributes), load and run it; checked by load_and_run."""
    path = write_param(directory, text)
    entries = {}
    for token in text.split():
        if token.startswith("@"):
            key, value = token[1:].split("=", 1)
            dims = [int(d) for d in value[1:value.index(")")].split(",")]
            itemsize = 8 if value.endswith("i64") else 4
            entries[f"op.{key}"] = bytes(int(np.prod(dims)) * itemsize)
    weights_archive(directory / "m.pnnx.bin", entries)
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal(INPUT_SHAPES[s]).astype(np.int64 if s.endswith("i64") else np.float32)
              for s in shapes]
    load_and_run(path, text, *inputs)


WRONG_TYPES = ["abc", "1.5", "(1.5,2.5)", "(a,b)", "None", "True", "-1", "(1,2,3)", "2147483647", "nan", "()",
               "1.0+2.0j", "(-1,-1)", "0"]


@pytest.mark.parametrize("op_type", LAYER_TYPES)
def test_every_layer_refuses_wrong_parameter_types_cleanly(tmp_path, op_type):
    """Every parameter name layers read, all set to one wrong value: a LayerCreateError, never a crash."""
    shapes = ["(1,3,8,8)f32"]
    for value in WRONG_TYPES:
        build_one_operator(tmp_path, one_operator_model(op_type, dict.fromkeys(PARAM_KEYS, value), shapes, []),
                           shapes)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(op_type=st.sampled_from(LAYER_TYPES),
       params=st.dictionaries(st.sampled_from(PARAM_KEYS), st.sampled_from(VALUES), max_size=6),
       shapes=st.lists(st.sampled_from(sorted(INPUT_SHAPES)), min_size=1, max_size=2),
       attrs=st.lists(st.sampled_from(ATTRS), max_size=3))
def test_random_one_operator_models_load_or_fail_cleanly(tmp_path_factory, op_type, params, shapes, attrs):
    directory = tmp_path_factory.mktemp("op")
    build_one_operator(directory, one_operator_model(op_type, params, shapes, attrs), shapes)


# ------------------------------------------------------------------ loading runs no code

def test_loading_and_running_never_evaluate_or_unpickle(workdir, monkeypatch):
    """eval/exec/compile, pickle and import-by-name all fail while a model loads and runs."""
    import builtins
    import importlib
    import pickle

    def forbidden(*args, **kwargs):
        raise AssertionError("a model file made kuiperinfer run code")

    for module, name in [(builtins, "eval"), (builtins, "exec"), (builtins, "compile"), (pickle, "loads"),
                         (pickle, "load"), (pickle, "Unpickler"), (importlib, "import_module")]:
        monkeypatch.setattr(module, name, forbidden)
    graph = kuiperinfer.load(write_param(workdir, PARAM))
    graph(INPUT)
    for expr in ("__import__('os').system('id')", "eval(@0)", "exec(@0)", "torch.load(@0)"):
        with pytest.raises(LayerCreateError, match="unknown function"):
            kuiperinfer.load(write_param(workdir, expression_model(expr)))
    with pytest.raises(UnknownOperatorError):
        kuiperinfer.load(write_param(workdir, _replace("F.relu  ", "os.system")))


# ------------------------------------------------------------------ regressions found by the fuzzing

@pytest.mark.parametrize("op_type, params, needle", [
    ("nn.AdaptiveAvgPool2d", {"output_size": "1.5"}, "'output_size' is kParameterFloat"),
    ("F.adaptive_max_pool1d", {"output_size": "(1.5,2.5)"}, "'output_size' is kParameterFloatArray"),
    ("Tensor.reshape", {"shape": "1.5"}, "'shape' is kParameterFloat"),
    ("torch.split", {"dim": "1", "split_size_or_sections": "1.5"}, "'split_size_or_sections' is kParameterFloat"),
    ("torch.split", {"dim": "1", "split_size_or_sections": "0"}, "must be a positive size"),
    ("torch.ones", {"size": "(2147483647)"}, "over the limit"),
    ("torch.zeros", {"size": "(2,-1)"}, "negative"),
])
def test_parameters_the_fuzzing_got_through_are_refused(tmp_path, op_type, params, needle):
    text = one_operator_model(op_type, params, ["(1,3,8,8)f32"], [])
    with pytest.raises(LayerCreateError, match=needle) as info:
        kuiperinfer.load(write_param(tmp_path, text))
    assert info.value.op_name == "op" and not unvalidated(info.value)


def test_expression_failing_at_run_time_names_the_operator(workdir):
    graph = kuiperinfer.load(write_param(workdir, expression_model("lshift(@0,@0)")), warmup=False)
    with pytest.raises(InferError, match=r"operator 'pnnx_expr_11' \(pnnx.Expression\): lshift\(\)"):
        graph(INPUT)


def test_expression_failing_in_the_warm_up_fails_the_run_naming_the_operator(workdir):
    graph = kuiperinfer.load(write_param(workdir, expression_model("lshift(@0,@0)")))   # the warm-up is skipped
    with pytest.raises(InferError, match=r"operator 'pnnx_expr_11' \(pnnx.Expression\): lshift\(\)"):
        graph(INPUT)


def test_a_list_reaching_an_operator_that_fails_names_it_with_the_list_shapes(workdir):
    """A list made by an expression (``[@0,1]``) and refused downstream: the message shows
    the list's shapes, not a second error raised while describing the first."""
    text = expression_model("[@0,1]")
    error = load_and_run(write_param(workdir, text), text)
    assert isinstance(error, InferError) and error.op_name == "torch.cat_1", error
    assert ", int]) " in str(error), error
