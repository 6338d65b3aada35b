"""3-D convolution and transposed convolution against PyTorch, each exported by pnnx:
nn.Conv3d, F.conv3d, nn.ConvTranspose3d, F.conv_transpose3d, with every option that
changes the computation, batched and unbatched; ``kuiper info``'s MACs for them."""

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from handmade import make_operator
from oracle import check_model, check_op

from kuiperinfer.errors import InferError, LayerCreateError
from kuiperinfer.inspect.summary import summarize
from kuiperinfer.layers import LayerRegisterer


def case_id(case: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in case.items())


def written_types(graph) -> set[str]:
    return {op.type for op in graph.operators}


CONV3D_CASES = [
    dict(kernel_size=3),
    dict(kernel_size=(3, 2, 1), stride=(2, 1, 2), padding=(1, 0, 2)),
    dict(kernel_size=3, padding=2, dilation=(2, 1, 2)),
    dict(kernel_size=3, groups=2, bias=False),
    dict(kernel_size=1, groups=2, stride=2),                       # one tap per window
    dict(kernel_size=3, padding="same", dilation=2),
    dict(kernel_size=(2, 3, 3), padding="same"),                   # even kernel: one more after than before
    dict(kernel_size=3, padding="valid"),
    dict(kernel_size=3, padding=1, padding_mode="reflect"),
    dict(kernel_size=3, padding=(1, 2, 0), padding_mode="replicate"),   # pnnx writes (0,0,2,2,1,1)
    dict(kernel_size=(2, 3, 4), padding="same", padding_mode="circular"),  # uneven amounts
    dict(kernel_size=3, padding=2, padding_mode="circular", stride=2),
    dict(kernel_size=(1, 3, 3), padding="same", padding_mode="reflect"),
]


@pytest.mark.parametrize("case", CONV3D_CASES, ids=case_id)
def test_conv3d(case, tmp_path):
    torch.manual_seed(0)
    graph = check_op(nn.Conv3d(4, 6, **case), (1, 4, 5, 6, 7), directory=tmp_path, batch=3)
    assert "nn.Conv3d" in written_types(graph)


def test_conv3d_unbatched(tmp_path):
    torch.manual_seed(0)
    conv = nn.Conv3d(3, 4, 3, padding=1)
    graph = check_model(nn.Sequential(conv), [torch.randn(3, 4, 5, 6)], tmp_path)
    conv_op, = (op for op in graph.operators if op.type == "nn.Conv3d")
    assert not conv_op.layer.batch_independent  # dimension 0 is the channels


@pytest.mark.parametrize("case", [dict(), dict(stride=2, padding=1), dict(dilation=(1, 2, 2), padding=(0, 2, 1)),
                                  dict(groups=2), dict(padding="same"), dict(padding="valid", stride=1)],
                         ids=case_id)
def test_functional_conv3d(case, tmp_path):
    def conv(x, w, b):
        return F.conv3d(x, w, b, **case)

    def conv_without_bias(x, w):
        return F.conv3d(x, w, **case)

    channels = 4 // case.get("groups", 1)
    torch.manual_seed(0)
    x, w, b = torch.randn(1, 4, 5, 6, 7), torch.randn(6, channels, 3, 3, 3), torch.randn(6)
    graph = check_model(_Fn(conv), [x, w, b], tmp_path, [[torch.randn(2, 4, 5, 6, 7), w, b]])
    assert "F.conv3d" in written_types(graph)
    check_model(_Fn(conv_without_bias), [x, w], tmp_path, [[torch.randn(2, 4, 5, 6, 7), w]])


CONV_TRANSPOSE3D_CASES = [
    dict(kernel_size=3),
    dict(kernel_size=3, stride=2),
    dict(kernel_size=(3, 2, 3), stride=(2, 1, 3), padding=(1, 0, 1), output_padding=(1, 0, 2)),
    dict(kernel_size=3, dilation=(2, 1, 2), padding=1),
    dict(kernel_size=3, dilation=2, stride=1, output_padding=1),    # output_padding under dilation
    dict(kernel_size=2, stride=2, groups=2, bias=False),
]


@pytest.mark.parametrize("case", CONV_TRANSPOSE3D_CASES, ids=case_id)
def test_conv_transpose3d(case, tmp_path):
    torch.manual_seed(0)
    graph = check_op(nn.ConvTranspose3d(4, 6, **case), (1, 4, 3, 4, 5), directory=tmp_path, batch=2)
    assert "nn.ConvTranspose3d" in written_types(graph)


def test_conv_transpose3d_unbatched(tmp_path):
    torch.manual_seed(0)
    check_model(nn.Sequential(nn.ConvTranspose3d(3, 2, 3, stride=2)), [torch.randn(3, 2, 3, 4)], tmp_path)


@pytest.mark.parametrize("case", [dict(), dict(stride=2, padding=1, output_padding=1), dict(groups=2, dilation=2)],
                         ids=case_id)
def test_functional_conv_transpose3d(case, tmp_path):
    def conv(x, w, b):
        return F.conv_transpose3d(x, w, b, **case)

    torch.manual_seed(0)
    groups = case.get("groups", 1)
    x, w, b = torch.randn(1, 4, 3, 4, 5), torch.randn(4, 6 // groups, 3, 3, 3), torch.randn(6)
    graph = check_model(_Fn(conv), [x, w, b], tmp_path, [[torch.randn(3, 4, 3, 4, 5), w, b]])
    assert "F.conv_transpose3d" in written_types(graph)
    check_model(_Fn(lambda x, w: F.conv_transpose3d(x, w, **case)), [x, w], tmp_path)


class _Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def test_info_counts_the_macs_of_3d_convolutions(tmp_path):
    model = nn.Sequential(nn.Conv3d(4, 6, 3, padding=1, groups=2), nn.ConvTranspose3d(6, 2, 2, stride=2))
    graph = check_model(model, [torch.randn(1, 4, 3, 4, 5)], tmp_path)
    summary = summarize(graph.param_path)
    conv, transposed = (op for op in summary.operators if op.type.startswith("nn.Conv"))
    assert conv.macs == 6 * 3 * 4 * 5 * (4 // 2) * 27        # every output: in_channels/groups * kernel
    assert transposed.macs == 6 * 3 * 4 * 5 * 2 * 8          # every input: out_channels/groups * kernel
    assert conv.flops == 2 * conv.macs + 6 * 3 * 4 * 5        # and one bias addition per output


@pytest.mark.parametrize("type_name,params,message", [
    ("nn.Conv3d", dict(kernel_size=(3, 3), in_channels=2, out_channels=2), "expected 3"),
    ("nn.Conv3d", dict(kernel_size=(3, 3, 3), in_channels=3, out_channels=2, groups=2), "divisible by groups"),
    ("nn.Conv3d", dict(kernel_size=(3, 3, 3), in_channels=2, out_channels=2, padding="full"), "unsupported padding"),
    ("nn.Conv3d", dict(kernel_size=(3, 3, 3), in_channels=2, out_channels=2, padding="same", stride=(2, 2, 2)),
     "stride 1"),
    ("nn.Conv3d", dict(kernel_size=(3, 3, 3), in_channels=2, out_channels=2, padding_mode="mirror"),
     "padding_mode"),
    ("nn.ConvTranspose3d", dict(kernel_size=(3, 3, 3), in_channels=2, out_channels=2, stride=(2, 2, 2),
                                output_padding=(2, 0, 0)), "output_padding"),
    ("nn.ConvTranspose3d", dict(kernel_size=(3, 3, 3), in_channels=2, out_channels=2, padding_mode="reflect"),
     "zeros only"),
    ("F.conv3d", dict(), "weight"),
])
def test_bad_parameters_raise_layer_create_error(type_name, params, message):
    with pytest.raises(LayerCreateError, match=message):
        LayerRegisterer.create_layer(make_operator(type_name, [[1, 2, 5, 5, 5]], **params))


def test_too_small_an_input_raises_infer_error():
    op = make_operator("F.conv3d", [[1, 2, 5, 5, 5], [2, 2, 3, 3, 3]])
    layer = LayerRegisterer.create_layer(op)
    with pytest.raises(InferError, match="too small"):
        layer.forward([np.zeros((1, 2, 2, 5, 5), np.float32), np.zeros((2, 2, 3, 3, 3), np.float32)])
    with pytest.raises(InferError, match="channels"):
        layer.forward([np.zeros((1, 3, 5, 5, 5), np.float32), np.zeros((2, 2, 3, 3, 3), np.float32)])
