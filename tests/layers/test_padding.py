"""Padding against PyTorch, each exported by pnnx: F.pad in every mode (negative amounts crop)
and the padding modules."""

import numpy as np
import pytest
import torch.nn as nn
import torch.nn.functional as F
from handmade import make_operator
from oracle import check_op

from kuiperinfer.errors import InferError, LayerCreateError
from kuiperinfer.layers import LayerRegisterer

PADS = {
    "constant": [(1, 2), (1, 2, 3, 0), (1, 2, 3, -1), (-2, -1, 0, 1), (1, 1, 2, 2, 1, 0)],
    "reflect": [(1, 2, 2, 1), (4, 3, 0, 2), (-1, 2, 2, -2)],
    "replicate": [(1, 2, 2, 1), (0, 3, -1, 2), (5, 0, 0, 6)],
    "circular": [(1, 2, 2, 1), (3, 0, 1, 4), (2, -1, -1, 2)],
}


def pad_all(pads: list[tuple], **kwargs):
    """One model that returns F.pad(x, pad, **kwargs) for every pad (negative amounts crop)."""
    return lambda x: tuple(F.pad(x, pad, **kwargs) for pad in pads)


@pytest.mark.parametrize("mode", list(PADS))
def test_pad(mode, tmp_path):
    check_op(pad_all(PADS[mode], mode=mode), (1, 3, 5, 7), directory=tmp_path, batch=2)


def test_pad_value(tmp_path):
    check_op(pad_all([(1, 2), (0, 1, -1, 3)], value=2.5), (1, 3, 5, 7), directory=tmp_path)


@pytest.mark.parametrize("mode", list(PADS))
def test_pad_1d(mode, tmp_path):
    pads = [(2, 1), (1, 4), (2, -3)] if mode == "constant" else [(2, 1), (0, 3), (3, -1)]
    check_op(pad_all(pads, mode=mode), (1, 3, 7), directory=tmp_path, batch=2)


@pytest.mark.parametrize("mode", list(PADS))
def test_pad_3d(mode, tmp_path):
    pads = [(1, 1, 2, 0, 1, 2)] + ([(1, 1, 2, 2, 1, 0, 1, 1)] if mode == "constant" else [])
    check_op(pad_all(pads, mode=mode), (1, 2, 3, 4, 5), directory=tmp_path)


@pytest.mark.parametrize("module", [nn.ZeroPad2d((1, 2, 3, 4)), nn.ConstantPad2d(2, 1.5), nn.ReflectionPad2d(1),
                                    nn.ReplicationPad2d((1, 0, 2, 0)), nn.ConstantPad1d((2, 1), -3.0),
                                    nn.ReflectionPad1d(2), nn.CircularPad2d(1)], ids=repr)
def test_padding_modules(module, tmp_path):
    shape = (1, 3, 7) if "1d" in type(module).__name__ else (1, 3, 5, 7)
    check_op(module, shape, directory=tmp_path, batch=2)


class HeldPaddings(nn.Module):
    """Padding modules held as attributes keep their nn.*Pad* type in the export."""

    def __init__(self):
        super().__init__()
        self.zero = nn.ZeroPad2d((0, 1, 0, 1))
        self.constant = nn.ConstantPad1d(2, 3.5)
        self.reflect = nn.ReflectionPad2d(1)
        self.replicate = nn.ReplicationPad2d((1, 0, 2, 1))
        self.circular = nn.CircularPad2d(1)

    def forward(self, x):
        return (self.zero(x), self.constant(x.flatten(2)), self.reflect(x), self.replicate(x),
                self.circular(x))


def test_padding_modules_held_by_a_model(tmp_path):
    graph = check_op(HeldPaddings(), (1, 3, 5, 6), directory=tmp_path, batch=2)
    types = {op.type for op in graph.operators}
    assert {"nn.ZeroPad2d", "nn.ReflectionPad2d"} <= types


# -- validation (operators made by hand: PyTorch itself refuses these models) --

@pytest.mark.parametrize("type_name,params,message", [
    ("F.pad", dict(pad=(1, 2, 3), mode="constant"), "even number"),
    ("F.pad", dict(pad=(1, 1), mode="symmetric"), "unsupported mode"),
    ("F.pad", dict(pad=(1, 1, 1, 1, 1, 1, 1, 1, 1, 1), mode="constant"), "more dimensions"),
])
def test_bad_parameters_raise_layer_create_error(type_name, params, message):
    with pytest.raises(LayerCreateError, match=message):
        LayerRegisterer.create_layer(make_operator(type_name, [[1, 4, 6, 6]], **params))


@pytest.mark.parametrize("type_name,params,shape", [
    ("F.pad", dict(pad=(3, 3), mode="reflect"), (1, 2, 3)),
    ("F.pad", dict(pad=(4, 0), mode="circular"), (1, 2, 3)),
])
def test_inputs_that_do_not_fit_raise_infer_error(type_name, params, shape):
    layer = LayerRegisterer.create_layer(make_operator(type_name, [list(shape)], **params))
    with pytest.raises(InferError):
        layer.forward([np.zeros(shape, dtype=np.float32)])
