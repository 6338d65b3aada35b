"""End to end: real pnnx exports, their ``expr=`` strings, evaluated by our engine.

Each model is exported with ``pnnx.export``; the ``pnnx.Expression`` lines of the
``.pnnx.param`` are read with a few lines of text handling (independent of the IR
package), evaluated on the operator's inputs, and compared with the generated
``<model>_pnnx.py`` (the PyTorch program pnnx writes: the ground truth for what the
file means) and, where pnnx keeps the meaning, with the original model.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from kuiperinfer.expression import compile_expression

pnnx = pytest.importorskip("pnnx")


@dataclass
class Op:
    type: str
    name: str
    inputs: list[str]
    outputs: list[str]
    params: dict[str, str]


def read_param(path: Path) -> list[Op]:
    ops = []
    for line in path.read_text().splitlines()[2:]:
        fields = line.split()
        n_in, n_out = int(fields[2]), int(fields[3])
        inputs = fields[4:4 + n_in]
        outputs = fields[4 + n_in:4 + n_in + n_out]
        params = dict(f.split("=", 1) for f in fields[4 + n_in + n_out:] if f[0] not in "@$#")
        ops.append(Op(fields[0], fields[1], inputs, outputs, params))
    return ops


@dataclass
class Export:
    ops: list[Op]
    generated: torch.nn.Module  # the Model of <name>_pnnx.py


def export(model: torch.nn.Module, inputs: tuple, directory: Path, inputs2: tuple | None = None) -> Export:
    pt = directory / "m.pt"
    if inputs2 is None:
        pnnx.export(model, str(pt), inputs)
    else:
        pnnx.export(model, str(pt), inputs, inputs2)
    spec = importlib.util.spec_from_file_location(f"generated_{directory.name}", directory / "m_pnnx.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    generated = module.Model().eval()
    return Export(read_param(directory / "m.pnnx.param"), generated)


def run_expressions(ops: list[Op], inputs: list[np.ndarray]) -> dict[str, object]:
    """Operand values: the graph inputs, then every expression whose inputs are known."""
    values: dict[str, object] = {}
    graph_inputs = [op.outputs[0] for op in ops if op.type == "pnnx.Input"]
    values.update(zip(graph_inputs, inputs))
    for op in ops:
        if op.type == "pnnx.Expression" and all(name in values for name in op.inputs):
            expression = compile_expression(op.params["expr"])
            values[op.outputs[0]] = expression.evaluate([values[name] for name in op.inputs])
    return values


def graph_outputs(ops: list[Op]) -> list[str]:
    output = next(op for op in ops if op.type == "pnnx.Output")
    producer = next((op for op in ops if output.inputs[0] in op.outputs), None)
    if producer is not None and producer.type == "prim::TupleConstruct":
        return producer.inputs
    return output.inputs


def expressions(ops: list[Op]) -> list[str]:
    return [op.params["expr"] for op in ops if op.type == "pnnx.Expression"]


class FloatArithmetic(torch.nn.Module):
    def forward(self, x, y):
        return (
            x * 0.5 + y,
            torch.sqrt(x.abs() + 1),
            torch.div(x, y, rounding_mode="floor"),   # pnnx writes div(@0,@1)
            torch.div(x, y, rounding_mode="trunc"),   # pnnx writes floor_divide(@0,@1)
            torch.remainder(x, -2.5) - torch.fmod(x, 2),
            torch.max(x, y) + torch.min(x, 1.5 * y) + torch.maximum(x, y),
            torch.pow(x, 2) - 1e-5 + torch.atan2(x, y) - x,
            torch.erf(x) * torch.logaddexp(x, y) / (1 - y).exp(),
        )


@pytest.fixture(scope="module")
def float_export(tmp_path_factory):
    torch.manual_seed(0)
    x = torch.randn(2, 4, 8) * 3
    y = torch.randn(2, 4, 8) + 0.1
    return export(FloatArithmetic(), (x, y), tmp_path_factory.mktemp("float")), (x, y)


def test_pnnx_fuses_float_arithmetic_into_expressions_we_parse(float_export):
    exported, _ = float_export
    texts = expressions(exported.ops)
    assert "add(mul(@0,0.5),@1)" in texts
    assert "sqrt(add(abs(@0),1))" in texts
    assert "div(@0,@1)" in texts and "floor_divide(@0,@1)" in texts
    for text in texts:
        compile_expression(text)


def test_float_expressions_match_the_generated_pnnx_python(float_export):
    exported, (x, y) = float_export
    values = run_expressions(exported.ops, [x.numpy(), y.numpy()])
    with torch.no_grad():
        expected = exported.generated(x, y)
    names = graph_outputs(exported.ops)
    assert len(names) == len(expected) == 8
    for name, reference in zip(names, expected):
        got = values[name]
        assert isinstance(got, np.ndarray) and got.dtype == np.float32
        torch.testing.assert_close(torch.from_numpy(got), reference, rtol=1e-5, atol=1e-5)


def test_rounding_modes_follow_the_file_not_the_original_model(float_export):
    exported, (x, y) = float_export
    values = run_expressions(exported.ops, [x.numpy(), y.numpy()])
    names = graph_outputs(exported.ops)
    floor_mode, trunc_mode = values[names[2]], values[names[3]]
    # the file says div and floor_divide: true division and floor division
    np.testing.assert_allclose(floor_mode, (x / y).numpy(), rtol=1e-6)
    np.testing.assert_array_equal(trunc_mode, torch.floor_divide(x, y).numpy())
    # ...which is not what the original model computed
    with torch.no_grad():
        original = FloatArithmetic()(x, y)
    assert not np.allclose(floor_mode, original[2].numpy())
    assert not np.array_equal(trunc_mode, original[3].numpy())
    # every other output agrees with the original model too
    for index in (0, 1, 4, 5, 6, 7):
        torch.testing.assert_close(torch.from_numpy(values[names[index]]), original[index],
                                   rtol=1e-5, atol=1e-5)


class IntegerArithmetic(torch.nn.Module):
    def forward(self, x):
        return ((x & 3) << 1) ^ (x >> 2) | 5, x // 3, x % -4, torch.fmod(x, 3), -x * 2 + 1


def test_integer_expressions_match_pnnx_and_torch(tmp_path):
    x = torch.randint(-100, 100, (2, 3, 4))
    exported = export(IntegerArithmetic(), (x,), tmp_path)
    assert "or(xor(lshift(and(@0,3),1),rshift(@0,2)),5)" in expressions(exported.ops)
    values = run_expressions(exported.ops, [x.numpy()])
    with torch.no_grad():
        expected = exported.generated(x)
        original = IntegerArithmetic()(x)
    for name, reference, model_value in zip(graph_outputs(exported.ops), expected, original):
        got = values[name]
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, reference.numpy())
        np.testing.assert_array_equal(got, model_value.numpy())


class ShapeArithmetic(torch.nn.Module):
    def forward(self, x):
        a = x.view(x.size(0), -1, 4)
        b = x * x.size(2) + x.size(1) / 2
        return a, b


def test_dynamic_shape_expressions(tmp_path):
    exported = export(ShapeArithmetic(), (torch.rand(2, 6, 8),), tmp_path, (torch.rand(3, 4, 8),))
    texts = expressions(exported.ops)
    assert "[size(@0,0),-1,4]" in texts
    assert any("size(@0,1)" in text and text != "[size(@0,0),-1,4]" for text in texts)
    for shape in [(2, 6, 8), (5, 2, 8)]:  # also a shape that was not traced
        x = torch.rand(*shape)
        values = run_expressions(exported.ops, [x.numpy()])
        reshape = next(op for op in exported.ops if op.type == "Tensor.reshape" and len(op.inputs) == 2)
        shape_list = values[reshape.inputs[1]]
        assert shape_list == [shape[0], -1, 4] and all(type(v) is int for v in shape_list)
        with torch.no_grad():
            expected = exported.generated(x)
        names = graph_outputs(exported.ops)
        np.testing.assert_array_equal(x.numpy().reshape(shape_list), expected[0].numpy())
        got = values[names[1]]
        assert got.dtype == np.float32
        torch.testing.assert_close(torch.from_numpy(got), expected[1])
        torch.testing.assert_close(torch.from_numpy(got), ShapeArithmetic()(x)[1])


class Expm1Log1p(torch.nn.Module):
    def forward(self, x, y):
        return (torch.expm1(x) * 2, torch.log1p(x.abs()), torch.expm1(x),
                torch.expm1(x) + torch.log1p(y.abs()) * y, torch.log1p(torch.expm1(y.abs())) - x)


def expm1_log1p_inputs():
    generator = torch.Generator().manual_seed(0)
    return torch.randn(2, 3, 4, generator=generator), torch.randn(2, 3, 4, generator=generator)


def test_expm1_and_log1p_as_the_pnnx_binary_writes_them(tmp_path):
    """pnnx's eval_expression.cpp knows no expm1/log1p: it prints them as bare names with the
    brackets misplaced. The tokens keep pnnx's prefix order, which its own readers (and ours) use."""
    x, y = expm1_log1p_inputs()
    exported = export(Expm1Log1p(), (x, y), tmp_path)
    texts = expressions(exported.ops)
    assert "mul(expm1,@0),2" in texts and "log1p,abs(@0)" in texts and "expm1,@0" in texts
    values = run_expressions(exported.ops, [x.numpy(), y.numpy()])
    with torch.no_grad():
        expected = exported.generated(x, y)
        original = Expm1Log1p()(x, y)
    for name, reference, model_value in zip(graph_outputs(exported.ops), expected, original):
        got = values[name]
        assert got.dtype == np.float32
        torch.testing.assert_close(torch.from_numpy(got), reference, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(torch.from_numpy(got), model_value, rtol=1e-5, atol=1e-6)


def test_expm1_and_log1p_through_the_pnnx_binary_from_torchscript(tmp_path):
    """The same model traced to TorchScript and converted by the pnnx command, then loaded whole."""
    import subprocess

    import kuiperinfer

    x, y = expm1_log1p_inputs()
    torch.jit.trace(Expm1Log1p().eval(), (x, y)).save(str(tmp_path / "ts.pt"))
    subprocess.run([pnnx.EXEC_PATH, "ts.pt", "inputshape=[2,3,4],[2,3,4]"], cwd=tmp_path,
                   capture_output=True, check=True)
    texts = expressions(read_param(tmp_path / "ts.pnnx.param"))
    assert {"mul(expm1,@0),2", "log1p,abs(@0)", "sub(log1p,expm1),abs(@0),@1"} <= set(texts)
    graph = kuiperinfer.load(tmp_path / "ts.pnnx.param")
    with torch.no_grad():
        expected = Expm1Log1p()(x, y)
    for got, reference in zip(graph.run(x.numpy(), y.numpy()), expected):
        torch.testing.assert_close(torch.from_numpy(got), reference, rtol=1e-5, atol=1e-6)


def test_log1p_from_onnx_is_decomposed_into_plain_functions(tmp_path):
    """ONNX has no Log1p (and no Expm1: torch.onnx refuses expm1): pnnx reads Log(Add(1, x))."""
    import subprocess
    import warnings

    pytest.importorskip("onnx")
    model = Lambda(lambda x: torch.log1p(x.abs()) * 2)
    x = torch.randn(2, 3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(tmp_path / "m.onnx"), dynamo=False)
    subprocess.run([pnnx.EXEC_PATH, "m.onnx", "inputshape=[2,3,4]"], cwd=tmp_path, capture_output=True,
                   check=True)
    ops = read_param(tmp_path / "m.pnnx.param")
    assert expressions(ops) == ["mul(log(add(1.0,abs(@0))),2.0)"]
    got = run_expressions(ops, [x.numpy()])[graph_outputs(ops)[0]]
    torch.testing.assert_close(torch.from_numpy(got), model(x), rtol=1e-5, atol=1e-6)


class Lambda(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


class ComplexArithmetic(torch.nn.Module):
    def forward(self, z, x):
        return (z * (1 - 2j) + 1.5, z.abs().pow(2), torch.exp(z) * x, x * (0.5 + 2j), (z - x) / (2 + 1j))


def test_complex_literals_and_complex_values_match_the_generated_python(tmp_path):
    generator = torch.Generator().manual_seed(0)
    z = torch.complex(torch.randn(2, 3, 4, generator=generator), torch.randn(2, 3, 4, generator=generator))
    x = torch.randn(2, 3, 4, generator=generator)
    exported = export(ComplexArithmetic(), (z, x), tmp_path)
    texts = expressions(exported.ops)
    assert any("1.000000e+00-2.000000e+00j" in text for text in texts)
    values = run_expressions(exported.ops, [z.numpy(), x.numpy()])
    with torch.no_grad():
        expected = exported.generated(z, x)
        original = ComplexArithmetic()(z, x)
    for name, reference, model_value in zip(graph_outputs(exported.ops), expected, original):
        got = values[name]
        assert str(got.dtype) == str(model_value.dtype).replace("torch.", "")
        torch.testing.assert_close(torch.from_numpy(got), reference, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(torch.from_numpy(got), model_value, rtol=1e-5, atol=1e-5)
