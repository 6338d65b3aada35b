""".param grammar: every piece of it, and a precise ParamSyntaxError for every malformation."""

from __future__ import annotations

import pytest

from kuiperinfer.errors import BinArchiveError, ParamSyntaxError
from kuiperinfer.pnnx import format_param, load_graph, param_file, parse_param

CONV = ("nn.Conv2d                conv                     1 1 0 1 bias=False stride=(1,1) "
        "@weight=(2,1,1,1)f32 $input=0 #0=(1,1,4,4)f32 #1=(1,2,4,4)f32")


def text_of(*op_lines, counts=None):
    if counts is None:
        ops = [line.split() for line in op_lines if line.strip()]
        counts = f"{len(ops)} {sum(int(tokens[3]) for tokens in ops)}"
    head = counts
    return "7767517\n" + head + "\n" + "\n".join(op_lines) + "\n"


def write(tmp_path, text, name="m.pnnx.param"):
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


def syntax_error(tmp_path, text) -> ParamSyntaxError:
    path = write(tmp_path, text)
    with pytest.raises(ParamSyntaxError) as info:
        load_graph(path)
    err = info.value
    assert err.path == str(path)
    assert str(err).startswith(f"{path}:{err.line}: ")
    return err


# ---------------------------------------------------------------- the grammar

def test_a_full_line_reads_into_the_ir():
    g = parse_param(text_of("pnnx.Input               in                       0 1 0 #0=(1,1,4,4)f32", CONV))
    conv = g.ops[1]
    assert (conv.type, conv.name, conv.line) == ("nn.Conv2d", "conv", 4)
    assert [o.name for o in conv.inputs] == ["0"] and [o.name for o in conv.outputs] == ["1"]
    assert conv.inputnames == ["input"]
    assert conv.params["stride"].value == [1, 1] and conv.params["bias"].value is False
    assert conv.attrs["weight"].shape == [2, 1, 1, 1] and conv.attrs["weight"].type == 1
    assert conv.attrs["weight"].data is None                      # read_param leaves data unloaded
    out = g.get_operand("1")
    assert (out.shape, out.type, out.producer) == ([1, 2, 4, 4], 1, conv)
    assert g.get_operand("0").consumers == [conv]
    assert g.get_operand("nope") is None


def test_unknown_dims_are_minus_one():
    g = parse_param(text_of("pnnx.Input in 0 1 x #x=(?,3,?)f16"))
    assert g.operands[0].shape == [-1, 3, -1] and g.operands[0].type == 3


def test_symbolic_dim_is_kept_like_pnnx():
    g = parse_param(text_of("pnnx.Input in 0 1 x #x=(%batch,3)f32"))
    x = g.operands[0]
    assert x.shape == [-233, 3] and x.params["__shape__0"].value == "batch"
    assert "#x=(%batch,3)f32" in format_param(g)


@pytest.mark.parametrize("suffix,code", [("f32", 1), ("f64", 2), ("f16", 3), ("i32", 4), ("i64", 5),
                                         ("i16", 6), ("i8", 7), ("u8", 8), ("bool", 9), ("c64", 10),
                                         ("c128", 11), ("c32", 12), ("bf16", 13), ("null", 0)])
def test_every_dtype_suffix(suffix, code):
    g = parse_param(text_of(f"pnnx.Attribute a 0 1 x @data=(2){suffix} #x=(2){suffix}"))
    assert g.operands[0].type == code and g.ops[0].attrs["data"].type == code


def test_names_with_dots_slashes_and_colons():
    name = "/model.22/Unsqueeze_12_output_0"
    g = parse_param(text_of(f"pnnx.Input in 0 1 {name}",
                            f"nn.MultiheadAttention model.attn:0 1 1 {name} y @out_proj.weight=(2,2)f32"))
    assert g.ops[1].name == "model.attn:0"
    assert list(g.ops[1].attrs) == ["out_proj.weight"]
    assert g.get_operand(name).consumers == [g.ops[1]]


def test_type_longer_than_the_padding():
    line = "F.scaled_dot_product_attention F.scaled_dot_product_attention_0 1 1 0 1"
    g = parse_param(text_of("pnnx.Input in 0 1 0", line))
    assert g.ops[1].type == "F.scaled_dot_product_attention"
    assert format_param(g).splitlines()[3] == line          # no padding left to add


def test_same_operand_twice_as_input():
    g = parse_param(text_of("pnnx.Input in 0 1 0",
                            "torch.cat cat 2 1 0 0 1 dim=0 #0=(2)f32 #0=(2)f32 #1=(4)f32"))
    cat = g.ops[1]
    assert cat.inputs == [g.operands[0], g.operands[0]]
    assert g.operands[0].consumers == [cat, cat]
    g.operands[0].remove_consumer(cat)
    assert g.operands[0].consumers == [cat]


def test_two_input_names_for_the_same_operand_fill_both_slots():
    g = parse_param(text_of("pnnx.Input in 0 1 0", "torch.matmul mm 2 1 0 0 1 $input=0 $other=0"))
    assert g.ops[1].inputnames == ["input", "other"]
    assert g.ops[1].named_input("other") is g.operands[0]


def test_blank_lines_are_skipped_and_line_numbers_stay_physical():
    g = parse_param("7767517\n2 2\n\npnnx.Input in 0 1 0\n   \npnnx.Output out 1 1 0 1\n\n")
    assert [op.line for op in g.ops] == [4, 6]


def test_crlf_line_ends_are_accepted():
    g = parse_param(text_of("pnnx.Input in 0 1 0").replace("\n", "\r\n"))
    assert g.ops[0].name == "in"


def test_parameter_value_with_equals_sign_splits_at_the_first():
    g = parse_param(text_of("pnnx.Input in 0 1 0", "torch.einsum e 1 1 0 1 equation=i->i=x"))
    assert g.ops[1].params["equation"].value == "i->i=x"


def test_zero_sized_and_empty_shapes():
    g = parse_param(text_of("pnnx.Attribute a 0 1 x @data=(0,3)f32 #x=(0,3)f32"))
    assert g.ops[0].attrs["data"].shape == [0, 3] and g.ops[0].attrs["data"].nbytes() == 0
    g = parse_param(text_of("pnnx.Attribute a 0 1 x @data=()f32"))
    assert g.ops[0].attrs["data"].shape == []


def test_format_pads_to_24_bytes_sorts_keys_and_orders_sections():
    g = parse_param(text_of("pnnx.Input in 0 1 0 #0=(1)f32",
                            "nn.X x 1 1 0 1 #0=(1)f32 #1=(1)f32 $a=0 @w=(1)f32 @b=(1)f32 z=1 k=2"))
    line = format_param(g).splitlines()[3]
    assert line == ("nn.X                     x                        1 1 0 1 k=2 z=1 "
                    "@b=(1)f32 @w=(1)f32 $a=0 #0=(1)f32 #1=(1)f32")


def test_format_pads_non_ascii_names_by_bytes_like_printf():
    g = parse_param(text_of("pnnx.Input ñame 0 1 0"))
    line = format_param(g).splitlines()[2]
    assert line.encode("utf-8") == b"pnnx.Input               \xc3\xb1ame" + b" " * 19 + b" 0 1 0"


def test_format_omits_shapeless_operands_and_unnamed_inputs():
    g = parse_param(text_of("pnnx.Input in 0 1 0", "torch.sum s 1 1 0 1 #0=(2)f32"))
    assert format_param(g).splitlines()[3].endswith("1 1 0 1 #0=(2)f32")


def test_load_without_attributes_needs_no_archive(tmp_path):
    path = write(tmp_path, text_of("pnnx.Input in 0 1 0", "pnnx.Output out 1 0 0"))
    g = load_graph(path)
    assert g.param_path == str(path) and g.bin_path == str(tmp_path / "m.pnnx.bin")


# ---------------------------------------------------------------- errors: file and line

def test_bad_magic(tmp_path):
    err = syntax_error(tmp_path, "7767518\n0 0\n")
    assert err.line == 1 and "magic" in err.reason


def test_empty_file(tmp_path):
    err = syntax_error(tmp_path, "")
    assert err.line == 1 and "empty" in err.reason


@pytest.mark.parametrize("counts", ["", "1", "1 x", "-1 2", "1 2 3"])
def test_bad_counts_line(tmp_path, counts):
    err = syntax_error(tmp_path, f"7767517\n{counts}\n")
    assert err.line == 2


def test_fewer_operator_lines_than_declared(tmp_path):
    err = syntax_error(tmp_path, text_of("pnnx.Input in 0 1 0", counts="2 1"))
    assert err.line == 2 and "declares 2 operators" in err.reason


def test_more_operator_lines_than_declared(tmp_path):
    err = syntax_error(tmp_path, text_of("pnnx.Input in 0 1 0", "pnnx.Output out 1 0 0", counts="1 1"))
    assert err.line == 4 and "more operator lines" in err.reason


def test_operand_count_disagrees(tmp_path):
    err = syntax_error(tmp_path, text_of("pnnx.Input in 0 1 0", counts="1 2"))
    assert err.line == 2 and "declares 2 operands" in err.reason


@pytest.mark.parametrize("counts", [f"{param_file.MAX_OPERATORS + 1} 0", f"0 {param_file.MAX_OPERANDS + 1}"])
def test_absurd_counts_are_refused(tmp_path, counts):
    err = syntax_error(tmp_path, f"7767517\n{counts}\n")
    assert err.line == 2 and "limit" in err.reason


def test_too_few_fields(tmp_path):
    err = syntax_error(tmp_path, text_of("pnnx.Input in 0 1 0", "nn.ReLU relu 1", counts="2 1"))
    assert err.line == 4 and "field" in err.reason


@pytest.mark.parametrize("counts", ["x 1", "1 -1", "1.0 1"])
def test_non_numeric_operand_counts(tmp_path, counts):
    err = syntax_error(tmp_path, text_of("pnnx.Input in 0 1 0", f"nn.ReLU relu {counts} 0 1"))
    assert err.line == 4 and "count" in err.reason


def test_too_many_inputs_declared(tmp_path):
    err = syntax_error(tmp_path, text_of("pnnx.Input in 0 1 0", "nn.ReLU relu 3 1 0 1", counts="2 2"))
    assert err.line == 4 and "only 2 operand name(s)" in err.reason


def test_n_out_too_large_swallows_a_parameter(tmp_path):
    err = syntax_error(tmp_path, text_of("pnnx.Input in 0 1 0", "nn.ReLU relu 1 2 0 1 inplace=False"))
    assert err.line == 4 and "'inplace=False' where an operand name" in err.reason


def test_n_out_too_small_leaves_a_bare_name(tmp_path):
    err = syntax_error(tmp_path, text_of("pnnx.Input in 0 1 0", "torch.split s 1 1 0 1 2 dim=0"))
    assert err.line == 4 and "expected key=value, got '2'" in err.reason


def test_non_utf8_bytes(tmp_path):
    text = text_of("pnnx.Input in 0 1 0", "nn.ReLU r\xe9lu 1 1 0 1").encode("latin-1")
    err = syntax_error(tmp_path, text)
    assert err.line == 4 and "UTF-8" in err.reason and "0xe9" in err.reason


def test_dangling_input(tmp_path):
    err = syntax_error(tmp_path, text_of("pnnx.Input in 0 1 0", "nn.ReLU relu 1 1 7 1"))
    assert err.line == 4 and "'7'" in err.reason and "before any operator produces it" in err.reason


def test_input_used_before_it_is_produced(tmp_path):
    err = syntax_error(tmp_path, text_of("nn.ReLU relu 1 1 0 1", "pnnx.Input in 0 1 0"))
    assert err.line == 3


def test_operand_produced_twice(tmp_path):
    err = syntax_error(tmp_path, text_of("pnnx.Input a 0 1 0", "pnnx.Input b 0 1 0"))
    assert err.line == 4 and "produced twice" in err.reason and "line 3" in err.reason


def test_duplicate_operator_name(tmp_path):
    err = syntax_error(tmp_path, text_of("pnnx.Input in 0 1 0", "pnnx.Input in 0 1 1"))
    assert err.line == 4 and "duplicate operator name 'in'" in err.reason


@pytest.mark.parametrize("decl,needle", [
    ("#0=1,2f32", "expected '(shape)dtype'"), ("#0=(1,2", "expected '(shape)dtype'"),
    ("#0=(1,2)", "missing dtype"), ("#0=(1,2)f8", "unknown dtype suffix 'f8'"),
    ("#0=(1,x)f32", "bad dimension 'x'"), ("#0=(1,-2)f32", "bad dimension '-2'"),
    ("#0=(1,,2)f32", "bad dimension ''"), ("#0=(1)f32 #0=(2)f32", "on line 4"),
    ("#9=(1)f32", "neither an input nor an output"),
])
def test_bad_operand_declarations(tmp_path, decl, needle):
    err = syntax_error(tmp_path, text_of("pnnx.Input in 0 1 0", f"nn.ReLU relu 1 1 0 1 {decl}"))
    assert err.line == 4 and needle in err.reason


@pytest.mark.parametrize("decl,needle", [
    ("@w=(?,2)f32", "bad dimension '?'"), ("@w=(2)f99", "unknown dtype suffix"),
    ("@w=2f32", "expected '(shape)dtype'"), ("@w=(2)f32 @w=(2)f32", "appears twice"),
    ("@=(2)f32", "empty name"),
])
def test_bad_attribute_declarations(tmp_path, decl, needle):
    err = syntax_error(tmp_path, text_of(f"pnnx.Attribute a 0 1 0 {decl}"))
    assert err.line == 3 and needle in err.reason


@pytest.mark.parametrize("decl,needle", [
    ("$input=5", "not an input"), ("$=0", "empty"), ("$a=0 $a=0", "appears twice"),
    ("$a=0 $b=0", "more $names"),
])
def test_bad_input_names(tmp_path, decl, needle):
    err = syntax_error(tmp_path, text_of("pnnx.Input in 0 1 0", f"nn.ReLU relu 1 1 0 1 {decl}"))
    assert err.line == 4 and needle in err.reason


def test_duplicate_and_empty_parameter_keys(tmp_path):
    err = syntax_error(tmp_path, text_of("pnnx.Input in 0 1 0 a=1 a=2"))
    assert err.line == 3 and "duplicate parameter 'a'" in err.reason
    err = syntax_error(tmp_path, text_of("pnnx.Input in 0 1 0 =2"))
    assert err.line == 3 and "empty key" in err.reason


def test_declared_tensor_over_the_limit_is_refused_before_reading(tmp_path):
    text = text_of("pnnx.Attribute a 0 1 0 @data=(1024,1024,1024,1024)f32")
    err = syntax_error(tmp_path, text)
    assert err.line == 3 and "exceeds the limit" in err.reason
    path = write(tmp_path, text_of("pnnx.Input in 0 1 0 #0=(1000,1000)f32"))
    with pytest.raises(ParamSyntaxError, match="max_tensor_bytes"):
        load_graph(path, max_tensor_bytes=1_000_000)
    assert load_graph(path, max_tensor_bytes=4_000_000).operands[0].shape == [1000, 1000]


def test_overlong_line_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(param_file, "MAX_LINE_BYTES", 64)
    err = syntax_error(tmp_path, text_of("pnnx.Input in 0 1 0 " + "k=" + "x" * 100))
    assert err.line == 3 and "longer than 64 bytes" in err.reason


def test_missing_file_is_a_model_format_error(tmp_path):
    with pytest.raises(ParamSyntaxError, match="cannot open"):
        load_graph(tmp_path / "absent.pnnx.param")


# ---------------------------------------------------------------- the archive side of load

def test_attributes_without_archive(tmp_path):
    path = write(tmp_path, text_of("pnnx.Attribute a 0 1 0 @data=(2)f32"))
    with pytest.raises(BinArchiveError, match="archive not found") as info:
        load_graph(path)
    assert info.value.path == str(tmp_path / "m.pnnx.bin")


def test_missing_entry_and_wrong_size_name_operator_attribute_and_sizes(tmp_path):
    import zipfile
    path = write(tmp_path, text_of("pnnx.Attribute a 0 1 0 @data=(2)f32 @more=(3)i8"))
    with zipfile.ZipFile(tmp_path / "m.pnnx.bin", "w") as z:
        z.writestr("a.data", b"\0" * 7)
    with pytest.raises(BinArchiveError) as info:
        load_graph(path)
    msg = info.value.reason
    assert "'a'" in msg and "'data'" in msg and "expected 8 bytes" in msg and "has 7 bytes" in msg
    with zipfile.ZipFile(tmp_path / "m.pnnx.bin", "w") as z:
        z.writestr("a.data", b"\0" * 8)
    with pytest.raises(BinArchiveError, match="entry 'a.more' is missing"):
        load_graph(path)


def test_explicit_bin_path_and_attribute_data(tmp_path):
    import zipfile

    import numpy as np
    path = write(tmp_path, text_of("pnnx.Attribute a.b 0 1 0 @c.d=(2)i16"))
    with zipfile.ZipFile(tmp_path / "weights.zip", "w") as z:
        z.writestr("a.b.c.d", np.array([7, -7], np.int16).tobytes())
    g = load_graph(path, tmp_path / "weights.zip")
    assert g.ops[0].attrs["c.d"].numpy().tolist() == [7, -7]
    assert isinstance(g.ops[0].attrs["c.d"].data, memoryview)
