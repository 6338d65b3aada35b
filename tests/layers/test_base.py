"""LayerRegisterer, register_layer, and the Layer/ParamLayer base classes."""

import numpy as np
import pytest

from kuiperinfer.errors import RegistryError, UnknownOperatorError, WeightError
from kuiperinfer.layers import Layer, LayerRegisterer, NonParamLayer, ParamLayer, register_layer
from kuiperinfer.runtime.operand import RuntimeOperand
from kuiperinfer.runtime.operator import RuntimeOperator


class Double(NonParamLayer):
    @classmethod
    def create(cls, op, options):
        return cls(op.name)

    def forward(self, inputs):
        return [inputs[0] * 2]


@pytest.fixture
def test_types():
    names = ["test.Double", "test.Twice"]
    yield names
    for name in names:
        LayerRegisterer.unregister(name)


def test_register_layer_registers_every_spelling(test_types):
    register_layer(*test_types)(Double)
    assert all(LayerRegisterer.has(name) for name in test_types)
    assert set(test_types) <= set(LayerRegisterer.layer_types())
    assert LayerRegisterer.layer_types() == sorted(LayerRegisterer.layer_types())


def test_registering_a_type_twice_is_an_error(test_types):
    LayerRegisterer.register(test_types[0], Double)
    with pytest.raises(RegistryError, match="already registered"):
        LayerRegisterer.register(test_types[0], Double)
    with pytest.raises(RegistryError, match="no create"):
        LayerRegisterer.register(test_types[1], object)


def test_the_registry_answers_what_a_type_is_without_building():
    assert LayerRegisterer.layer_class("Tensor.view").shape_only
    assert not LayerRegisterer.layer_class("nn.Conv2d").shape_only
    assert LayerRegisterer.layer_class("nn.Conv2d").takes_activation(make_operator("nn.Conv2d")[0])
    assert LayerRegisterer.layer_class("no.Such") is None


def test_builtin_spellings_are_registered():
    for name in ["nn.ReLU", "F.relu", "torch.relu", "nn.Conv2d", "F.conv2d", "nn.MaxPool2d", "F.max_pool2d",
                 "nn.AdaptiveAvgPool2d", "nn.Linear", "torch.flatten", "Tensor.view", "Tensor.reshape",
                 "torch.cat", "nn.Softmax", "F.softmax", "nn.BatchNorm2d", "torch.split", "torch.chunk",
                 "pnnx.Expression", "nn.Sigmoid", "F.sigmoid"]:
        assert LayerRegisterer.has(name), name


def make_operator(type_name="test.Double"):
    op = RuntimeOperator("node", type_name)
    x = RuntimeOperand("x", [1, 3], 1)
    y = RuntimeOperand("y", [1, 3], 1, op)
    op.input_operands_seq.append(x)
    op.input_names.append("")
    x.consumers.append(op)
    op.output_operands.append(y)
    return op, x, y


def test_create_layer_and_forward(test_types):
    register_layer(test_types[0])(Double)
    op, _, _ = make_operator()
    layer = LayerRegisterer.create_layer(op)
    assert isinstance(layer, Double) and layer.layer_name == "node"
    np.testing.assert_array_equal(layer.forward([np.ones(3)])[0], np.full(3, 2.0))


def test_unknown_type_suggests_close_names():
    op, _, _ = make_operator("nn.Conv2D")
    with pytest.raises(UnknownOperatorError, match="'node'.*nn.Conv2D.*nn.Conv2d"):
        LayerRegisterer.create_layer(op)


class Scale(ParamLayer):
    def __init__(self, name, weight, bias=None):
        super().__init__(name, weight, bias)
        self.pack()

    def pack(self):
        self.packed = self._weight.sum()


def test_param_layer_weights_and_bias():
    layer = Scale("s", np.ones((2, 2)), np.zeros(2))
    assert layer.packed == 4
    layer.set_weights(np.full((2, 2), 2.0))
    assert layer.packed == 8 and layer.weights().dtype == np.float32
    layer.set_bias([1, 2])
    np.testing.assert_array_equal(layer.bias(), [1, 2])
    with pytest.raises(WeightError, match=r"shape \(3,\), expected \(2,\)"):
        layer.set_bias([1, 2, 3])
    with pytest.raises(WeightError, match="no bias"):
        Scale("t", np.ones(2)).set_bias([1, 2])


def test_base_layer_requires_forward():
    with pytest.raises(NotImplementedError):
        Layer("x").forward([])
