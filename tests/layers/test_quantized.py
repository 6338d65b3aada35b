"""Quantized operators are refused on purpose, with a reason, by loading and by ``kuiper check``.

pnnx writes them for models converted with torch.ao.quantization; this PyTorch build's
pnnx cannot trace such a model (no quantized engine in its process), so the models are
written by hand, in the form pnnx's quantization passes write.
"""

import pytest
from cli_runner import run
from handmade import write_model

import kuiperinfer
from kuiperinfer.errors import LayerCreateError, UnknownOperatorError
from kuiperinfer.layers.quantized import QUANTIZED_REASON
from kuiperinfer.runtime.registry import LayerRegisterer

QUANTIZED = ["nn.quantized.Conv2d", "nn.quantized.Linear", "nn.quantized.Quantize", "nn.quantized.DeQuantize",
             "nn.quantized.cat", "nn.intrinsic.quantized.ConvReLU2d", "nn.intrinsic.quantized.LinearReLU",
             "torch.quantize_per_tensor", "torch.dequantize"]

# a float input quantized, a quantized convolution and linear layer, dequantized at the end
MODEL = """7767517
6 5
pnnx.Input input 0 1 0 #0=(1,3,8,8)f32
torch.quantize_per_tensor quant 1 1 0 1 dtype=torch.quint8 scale=0.05 zero_point=64 $input=0 #0=(1,3,8,8)f32 #1=(1,3,8,8)u8
nn.quantized.Conv2d conv 1 1 1 2 bias=True dilation=(1,1) groups=1 in_channels=3 kernel_size=(3,3) out_channels=4 padding=(1,1) padding_mode=zeros stride=(1,1) scale=0.1 zero_point=0 @weight=(4,3,3,3)f32 @bias=(4)f32 #1=(1,3,8,8)u8 #2=(1,4,8,8)u8
nn.quantized.DeQuantize dequant 1 1 2 3 #2=(1,4,8,8)u8 #3=(1,4,8,8)f32
torch.dequantize dequant2 1 1 3 4 #3=(1,4,8,8)f32 #4=(1,4,8,8)f32
pnnx.Output output 1 0 4 #4=(1,4,8,8)f32
"""


@pytest.mark.parametrize("op_type", QUANTIZED)
def test_every_quantized_type_is_refused_with_the_reason(op_type):
    layer_class = LayerRegisterer.layer_class(op_type)
    assert layer_class is not None and layer_class.refused == QUANTIZED_REASON


def test_loading_names_the_operator_and_suggests_a_float_export(tmp_path):
    path = write_model(tmp_path, MODEL, {"conv.weight": (4, 3, 3, 3), "conv.bias": (4,)})
    with pytest.raises(LayerCreateError, match="export the float model") as info:
        kuiperinfer.load(path)
    assert not isinstance(info.value, UnknownOperatorError)
    assert info.value.op_name == "quant" and "torch.quantize_per_tensor" in str(info.value)


def test_kuiper_check_lists_every_quantized_operator_with_the_reason(tmp_path, capsys):
    path = write_model(tmp_path, MODEL, {"conv.weight": (4, 3, 3, 3), "conv.bias": (4,)})
    code, out, _ = run(capsys, "check", str(path))
    assert code == 1
    assert "4 of 4 operators cannot be built" in out
    for name, op_type in [("quant", "torch.quantize_per_tensor"), ("conv", "nn.quantized.Conv2d"),
                          ("dequant", "nn.quantized.DeQuantize"), ("dequant2", "torch.dequantize")]:
        assert f"{name} ({op_type}, line" in out
    assert out.count("quantized operators are not supported") == 4 and "no layer" not in out
