"""Damaged files: the readers either succeed or raise our own error, never a bare Python one."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kuiperinfer.errors import BinArchiveError, ParamSyntaxError
from kuiperinfer.pnnx import StoreZipReader, StoreZipWriter, format_param, load_graph, parse_param

PARAM = """7767517
6 6
pnnx.Input               pnnx_input_0             0 1 0 #0=(1,3,8,8)f32
nn.Conv2d                convbn2d_0               1 1 0 1 bias=True dilation=(1,1) groups=1 in_channels=3 kernel_size=(3,3) out_channels=4 padding=(1,1) padding_mode=zeros stride=(1,1) @bias=(4)f32 @weight=(4,3,3,3)f32 $input=0 #0=(1,3,8,8)f32 #1=(1,4,8,8)f32
torch.split              torch.split_0            1 2 1 2 3 dim=1 split_size_or_sections=(1,3) $tensor=1 #1=(1,4,8,8)f32 #2=(1,1,8,8)f32 #3=(1,3,8,8)f32
torch.cat                torch.cat_0              3 1 2 2 3 4 dim=1 #2=(1,1,8,8)f32 #2=(1,1,8,8)f32 #3=(1,3,8,8)f32 #4=(1,5,8,8)f32
pnnx.Expression          pnnx_expr_0              1 1 4 5 expr=add(mul(@0,2),1.000000e-5) #4=(1,5,8,8)f32 #5=(?,5,8,8)f32
pnnx.Output              pnnx_output_0            1 0 5 #5=(?,5,8,8)f32
"""

EDIT_CHARS = "=()#@$,?%. \n-0123456789abf"


def test_the_sample_is_valid():
    assert format_param(parse_param(PARAM)) == PARAM


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(PARAM) - 1), st.sampled_from(["delete", "insert", "replace"]),
                          st.sampled_from(EDIT_CHARS)), min_size=1, max_size=4))
def test_edited_param_text_parses_or_raises_param_syntax_error(edits):
    text = list(PARAM)
    for position, action, char in edits:
        position %= max(len(text), 1)
        if action == "delete" and text:
            del text[position]
        elif action == "insert":
            text.insert(position, char)
        elif text:
            text[position] = char
    try:
        graph = parse_param("".join(text))
    except ParamSyntaxError as e:
        assert e.line is not None and e.line >= 1
    else:
        format_param(graph)  # whatever was accepted can be written back


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_after_the_header_never_escape(tail):
    try:
        parse_param(b"7767517\n2 2\n" + tail)
    except ParamSyntaxError:
        pass


def _archive(tmp_path_factory):
    path = tmp_path_factory.mktemp("zip") / "a.bin"
    with StoreZipWriter(path) as w:
        w.write_file("convbn2d_0.bias", np.arange(4, dtype=np.float32))
        w.write_file("convbn2d_0.weight", np.arange(108, dtype=np.float32))
        w.write_file("mha.out_proj.weight", b"\x01\x02\x03")
    return path.read_bytes()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_damaged_archives_open_or_raise_bin_archive_error(tmp_path_factory, data):
    original = _archive(tmp_path_factory)
    damaged = bytearray(original)
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(damaged) - 1))
        damaged[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(damaged)))
    path = tmp_path_factory.mktemp("bad") / "a.bin"
    path.write_bytes(bytes(damaged[:cut]) if data.draw(st.booleans()) else bytes(damaged))
    try:
        with StoreZipReader(path) as r:
            for name in r.names():
                assert len(r.view(name)) == r.size(name)
    except BinArchiveError:
        pass


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(size=st.integers(0, 200))
def test_wrong_entry_sizes_are_reported_not_crashed(tmp_path_factory, size):
    directory = tmp_path_factory.mktemp("g")
    (directory / "m.pnnx.param").write_text(PARAM)
    with StoreZipWriter(directory / "m.pnnx.bin") as w:
        w.write_file("convbn2d_0.bias", b"\0" * 16)
        w.write_file("convbn2d_0.weight", b"\0" * size)
    try:
        graph = load_graph(directory / "m.pnnx.param")
    except BinArchiveError as e:
        assert size != 432 and f"has {size} bytes" in e.reason
    else:
        assert size == 432 and graph.ops[1].attrs["weight"].numpy().shape == (4, 3, 3, 3)
