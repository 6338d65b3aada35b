"""Real pnnx exports, made in the test run: read them, compare with torch, write them back byte for byte."""

from __future__ import annotations

import mmap
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
from cpu_time import cpu_time

torch = pytest.importorskip("torch")
pnnx = pytest.importorskip("pnnx")
nn = torch.nn
F = torch.nn.functional

from kuiperinfer.pnnx import (  # noqa: E402
    ParamType,
    StoreZipReader,
    StoreZipWriter,
    encode_parameter,
    format_float,
    format_param,
    load_graph,
    save_graph,
)

# ---------------------------------------------------------------- the models

class ConvBnRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(8 * 4 * 4, 5)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 1.5)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        x = self.pool(F.relu(self.bn(self.conv(x))))
        return self.fc(torch.flatten(x, 1))


class Misc(nn.Module):
    """LayerNorm(eps=1e-5), split, cat of the same operand twice, an Expression, a tuple out."""

    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(16, eps=1e-5)

    def forward(self, x):
        a, b = torch.split(x, [6, 10], dim=-1)
        c = torch.cat([a, a, b], dim=-1)
        y = self.ln(x) * 2 + 1.5
        return y, c


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(16, 2, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x)[0]


class DTypes(nn.Module):
    """Constant tensors of other dtypes become pnnx.Attribute operators (f64 f16 i32 i64 c64)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("b64", torch.rand(1, 4, dtype=torch.float64))
        self.register_buffer("b16", torch.rand(1, 4).half())
        self.register_buffer("idx", torch.tensor([3, 0, 1]))
        self.register_buffer("i32", torch.tensor([[1, -2, 3, -4]], dtype=torch.int32))

    def forward(self, x):
        return (x.double() + self.b64, x * self.b16, torch.index_select(x, 1, self.idx),
                x + self.i32, torch.full((2,), 1.5 + 2j))


class Dynamic(nn.Module):
    def forward(self, x):
        return torch.matmul(x, x), x.sum()


SLOPES = [0.1, 0.123456789, 1e-4, 9.99e-5, 999999.9, 12345678.5, 1e-7, -1e7, 100000.0,
          0.0382674076, -0.064285621, 0.000789431739, 0.30000001]


class Floats(nn.Module):
    def forward(self, x):
        for slope in SLOPES:
            x = F.leaky_relu(x, slope)
        return torch.clamp(x, min=-1e-30, max=float("inf"))


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + identity)


class ResNet18Narrow(nn.Module):
    """ResNet-18's layout (so its .param has ResNet-18's lines) at a quarter of the width."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 7, 2, 3, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 16
        for cout, stride in ((16, 1), (32, 2), (64, 2), (128, 2)):
            blocks += [Block(cin, cout, stride), Block(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(128, 10)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


MODELS = {
    "convbnrelu": (ConvBnRelu, lambda: (torch.rand(1, 3, 8, 8),), None),
    "misc": (Misc, lambda: (torch.rand(2, 3, 16),), None),
    "attention": (Attention, lambda: (torch.rand(1, 5, 16),), None),
    "dtypes": (DTypes, lambda: (torch.rand(1, 4),), None),
    "dynamic": (Dynamic, lambda: (torch.rand(4, 4),), lambda: (torch.rand(6, 6),)),
    "floats": (Floats, lambda: (torch.rand(1, 4),), None),
    "resnet18": (ResNet18Narrow, lambda: (torch.rand(1, 3, 32, 32),), None),
}


class Exports:
    """Exports each model once per module, on first use."""

    def __init__(self, root):
        self.root = root
        self.done = {}

    def __call__(self, name):
        if name not in self.done:
            cls, inputs, inputs2 = MODELS[name]
            torch.manual_seed(0)
            model = cls().eval()
            directory = self.root / name
            directory.mkdir()
            kwargs = {} if inputs2 is None else {"inputs2": inputs2()}
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.trace's notice
                pnnx.export(model, str(directory / "m.pt"), inputs(), check_trace=False, **kwargs)
            self.done[name] = (model, directory / "m.pnnx.param", directory / "m.pnnx.bin")
        return self.done[name]


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    return Exports(tmp_path_factory.mktemp("exports"))


ALL = list(MODELS)


# ---------------------------------------------------------------- byte-identical round trips

@pytest.mark.parametrize("name", ALL)
def test_pnnx_writes_the_file_pair(export, name):
    _, param, bin_ = export(name)
    assert param.name == "m.pnnx.param" and param.exists()
    assert bin_.name == "m.pnnx.bin" and bin_.exists()


@pytest.mark.parametrize("name", ALL)
def test_param_text_round_trips_byte_for_byte(export, name):
    _, param, _ = export(name)
    assert format_param(load_graph(param)).encode("utf-8") == param.read_bytes()


@pytest.mark.parametrize("name", ALL)
def test_save_round_trips_both_files_byte_for_byte(export, name, tmp_path):
    _, param, bin_ = export(name)
    save_graph(load_graph(param), tmp_path / "out.pnnx.param")
    assert (tmp_path / "out.pnnx.param").read_bytes() == param.read_bytes()
    assert (tmp_path / "out.pnnx.bin").read_bytes() == bin_.read_bytes()


@pytest.mark.parametrize("name", ALL)
def test_parameters_encode_to_the_text_pnnx_wrote(export, name):
    _, param, _ = export(name)
    for op in load_graph(param).ops:
        for key, p in op.params.items():
            if op.type == "pnnx.Expression" and key == "expr":
                continue  # an expression is text, whatever it looks like
            assert encode_parameter(p) == p.text, (op.name, key)


@pytest.mark.parametrize("name", ALL)
def test_archive_reader_then_writer_reproduces_pnnx_archive(export, name, tmp_path):
    _, _, bin_ = export(name)
    with StoreZipReader(bin_) as r, StoreZipWriter(tmp_path / "copy.bin") as w:
        for entry in r.names():
            r.check_crc(entry)
            w.write_file(entry, r.view(entry))
    assert (tmp_path / "copy.bin").read_bytes() == bin_.read_bytes()


@pytest.mark.parametrize("name", ALL)
def test_pnnx_archive_agrees_with_python_zipfile(export, name):
    _, _, bin_ = export(name)
    with zipfile.ZipFile(bin_) as z, StoreZipReader(bin_) as r:
        assert r.names() == z.namelist()
        for entry in z.namelist():
            assert bytes(r.view(entry)) == z.read(entry)


def test_saving_over_the_loaded_files_is_safe(export, tmp_path):
    _, param, bin_ = export("convbnrelu")
    (tmp_path / "m.pnnx.param").write_bytes(param.read_bytes())
    (tmp_path / "m.pnnx.bin").write_bytes(bin_.read_bytes())
    g = load_graph(tmp_path / "m.pnnx.param")
    save_graph(g, tmp_path / "m.pnnx.param")
    assert (tmp_path / "m.pnnx.bin").read_bytes() == bin_.read_bytes()
    assert g.ops[1].attrs["weight"].numpy().shape == (8, 3, 3, 3)  # old mapping still readable


# ---------------------------------------------------------------- structure and values

@pytest.mark.parametrize("name", ALL)
def test_graph_is_consistent(export, name):
    _, param, _ = export(name)
    g = load_graph(param)
    for operand in g.operands:
        assert operand.producer is not None and operand in operand.producer.outputs
        for consumer in operand.consumers:
            assert operand in consumer.inputs
    for op in g.ops:
        assert len(op.inputnames) == len(op.inputs)
        for operand in op.inputs:
            assert op in operand.consumers
    assert g.ops[0].type == "pnnx.Input" and g.ops[-1].type == "pnnx.Output"


@pytest.mark.parametrize("name", ALL)
def test_attributes_are_zero_copy_views_of_the_mapped_archive(export, name):
    _, param, _ = export(name)
    for op in load_graph(param).ops:
        for attr in op.attrs.values():
            assert isinstance(attr.data, memoryview) and isinstance(attr.data.obj, mmap.mmap)
            arr = attr.numpy()
            assert not arr.flags.owndata and not arr.flags.writeable
            assert arr.nbytes == attr.nbytes()


def test_conv_bn_folded_weights_match_torch(export):
    model, param, _ = export("convbnrelu")
    g = load_graph(param)
    conv = next(op for op in g.ops if op.type == "nn.Conv2d")
    assert conv.name.startswith("convbn2d")  # pnnx folded the BatchNorm into it
    assert conv.params["padding"].value == [1, 1] and conv.params["kernel_size"].value == [3, 3]
    bn = model.bn
    scale = (bn.weight / torch.sqrt(bn.running_var + bn.eps)).detach()
    weight = (model.conv.weight * scale[:, None, None, None]).detach().numpy()
    bias = ((model.conv.bias - bn.running_mean) * scale + bn.bias).detach().numpy()
    np.testing.assert_allclose(conv.attrs["weight"].numpy(), weight, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(conv.attrs["bias"].numpy(), bias, rtol=1e-5, atol=1e-6)
    fc = next(op for op in g.ops if op.type == "nn.Linear")
    np.testing.assert_array_equal(fc.attrs["weight"].numpy(), model.fc.weight.detach().numpy())
    np.testing.assert_array_equal(fc.attrs["bias"].numpy(), model.fc.bias.detach().numpy())


def test_layernorm_split_cat_expression_and_tuple(export):
    model, param, _ = export("misc")
    g = load_graph(param)
    by_type = {op.type: op for op in g.ops}
    ln = by_type["nn.LayerNorm"]
    assert ln.params["eps"].text == "1.000000e-5" and ln.params["eps"].value == 1e-5
    assert ln.params["normalized_shape"].value == [16]            # written (16)
    np.testing.assert_array_equal(ln.attrs["weight"].numpy(), model.ln.weight.detach().numpy())
    split = by_type["torch.split"]
    assert split.params["split_size_or_sections"].value == [6, 10] and len(split.outputs) == 2
    cat = by_type["torch.cat"]
    assert cat.inputs[0] is cat.inputs[1]
    assert cat.inputs[0].consumers.count(cat) == 2
    expr = by_type["pnnx.Expression"]
    assert expr.params["expr"].type == ParamType.STRING and "@0" in expr.params["expr"].value
    assert g.ops[-2].type == "prim::TupleConstruct" and g.ops[-1].type == "pnnx.Output"


def test_multihead_attention_attribute_names_with_dots(export):
    model, param, bin_ = export("attention")
    g = load_graph(param)
    mha = next(op for op in g.ops if op.type == "nn.MultiheadAttention")
    assert {"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"} <= set(mha.attrs)
    with StoreZipReader(bin_) as r:
        assert f"{mha.name}.out_proj.weight" in r
    np.testing.assert_array_equal(mha.attrs["out_proj.weight"].numpy(),
                                  model.mha.out_proj.weight.detach().numpy())
    np.testing.assert_array_equal(mha.attrs["in_proj_weight"].numpy(),
                                  model.mha.in_proj_weight.detach().numpy())


def test_attributes_of_other_dtypes_match_torch(export):
    model, param, _ = export("dtypes")
    g = load_graph(param)
    by_name = {op.name: op.attrs["data"] for op in g.ops if op.type == "pnnx.Attribute"}
    expected = {"b64": (2, model.b64), "b16": (3, model.b16), "idx": (5, model.idx), "i32": (4, model.i32)}
    for name, (code, tensor) in expected.items():
        attr = by_name[name]
        assert attr.type == code and attr.numpy().dtype == tensor.numpy().dtype
        np.testing.assert_array_equal(attr.numpy(), tensor.numpy())
    complex_attr = next(a for a in by_name.values() if a.type == 10)
    np.testing.assert_array_equal(complex_attr.numpy(), np.full(2, 1.5 + 2j, np.complex64))


def test_dynamic_shapes_and_one_operand_as_two_named_inputs(export):
    _, param, _ = export("dynamic")
    g = load_graph(param)
    assert g.ops[0].outputs[0].shape == [-1, -1]
    mm = next(op for op in g.ops if op.type == "torch.matmul")
    assert mm.inputnames == ["input", "other"] and mm.inputs[0] is mm.inputs[1]
    total = next(op for op in g.ops if op.type == "torch.sum")
    assert total.outputs[0].shape == [] and total.outputs[0].type == 0  # 0-dim: no #shape written


def test_float_parameters_are_written_as_format_float(export):
    _, param, _ = export("floats")
    g = load_graph(param)
    slopes = [op.params["negative_slope"] for op in g.ops if op.type == "F.leaky_relu"]
    assert [p.text for p in slopes] == [format_float(v) for v in SLOPES]
    assert [p.value for p in slopes] == pytest.approx(SLOPES, rel=1e-7)
    clamp = next(op for op in g.ops if op.type == "torch.clamp")
    assert clamp.params["max"].text == "inf" and clamp.params["min"].text == "-1.000000e-30"


def test_resnet18_param_loads_in_a_few_milliseconds(export):
    _, param, _ = export("resnet18")
    load_graph(param)  # warm the file cache
    best = min(_timed(lambda: load_graph(param)) for _ in range(5))
    g = load_graph(param)
    assert sum(op.type == "nn.Conv2d" for op in g.ops) == 20
    assert best < 0.05, f"loading took {best * 1000:.1f} ms"


def _timed(fn):
    with cpu_time() as spent:
        fn()
    return spent.seconds


BUNDLED = sorted((Path(__file__).resolve().parents[2] / "kuiperinfer" / "models").glob("**/*.pnnx.param"))


@pytest.mark.parametrize("param", BUNDLED, ids=lambda p: p.parent.name)
def test_bundled_models_round_trip_byte_for_byte(param, tmp_path):
    save_graph(load_graph(param), tmp_path / "out.pnnx.param")
    assert (tmp_path / "out.pnnx.param").read_bytes() == param.read_bytes()
    assert (tmp_path / "out.pnnx.bin").read_bytes() == param.with_suffix(".bin").read_bytes()
