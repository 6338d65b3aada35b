"""Hostile and unusual inputs to a built graph.

Wrong counts, names, ranks and dtypes give an :class:`InputError` naming the input and
both shapes; float64/float16/int, non-contiguous and read-only arrays are converted to
the graph's float32; the caller's array is never modified; NaN and Inf propagate as in
PyTorch; batch 0 is refused clearly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kuiperinfer
from kuiperinfer.errors import InputError
from kuiperinfer.pnnx import StoreZipWriter

# conv -> relu -> max pool -> flatten -> linear, on (N, 3, 8, 8), and a second input added
# after the linear: two inputs, one output.
PARAM = """7767517
9 8
pnnx.Input               image                    0 1 0 #0=(1,3,8,8)f32
pnnx.Input               offset                   0 1 1 #1=(1,5)f32
nn.Conv2d                conv                     1 1 0 2 bias=True dilation=(1,1) groups=1 in_channels=3 kernel_size=(3,3) out_channels=4 padding=(1,1) padding_mode=zeros stride=(1,1) @bias=(4)f32 @weight=(4,3,3,3)f32 #0=(1,3,8,8)f32 #2=(1,4,8,8)f32
F.relu                   relu                     1 1 2 3 #2=(1,4,8,8)f32 #3=(1,4,8,8)f32
F.max_pool2d             pool                     1 1 3 4 ceil_mode=False dilation=(1,1) kernel_size=(4,4) padding=(0,0) return_indices=False stride=(4,4) #3=(1,4,8,8)f32 #4=(1,4,2,2)f32
torch.flatten            flatten                  1 1 4 5 end_dim=-1 start_dim=1 #4=(1,4,2,2)f32 #5=(1,16)f32
nn.Linear                fc                       1 1 5 6 bias=True in_features=16 out_features=5 @bias=(5)f32 @weight=(5,16)f32 #5=(1,16)f32 #6=(1,5)f32
pnnx.Expression          add                      2 1 6 1 7 expr=add(@0,@1) #6=(1,5)f32 #1=(1,5)f32 #7=(1,5)f32
pnnx.Output              out                      1 0 7
"""

RNG = np.random.default_rng(0)
CONV_W = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
CONV_B = RNG.standard_normal(4).astype(np.float32)
FC_W = RNG.standard_normal((5, 16)).astype(np.float32)
FC_B = RNG.standard_normal(5).astype(np.float32)


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    directory = tmp_path_factory.mktemp("inputs")
    (directory / "m.pnnx.param").write_text(PARAM)
    with StoreZipWriter(directory / "m.pnnx.bin") as writer:
        for name, array in {"conv.bias": CONV_B, "conv.weight": CONV_W, "fc.bias": FC_B, "fc.weight": FC_W}.items():
            writer.write_file(name, array.tobytes())
    return kuiperinfer.load(directory / "m.pnnx.param")


def torch_reference(image: np.ndarray, offset: np.ndarray) -> np.ndarray:
    x = torch.from_numpy(np.asarray(image, np.float32))
    y = torch.relu(torch.nn.functional.conv2d(x, torch.from_numpy(CONV_W), torch.from_numpy(CONV_B), padding=1))
    y = torch.nn.functional.max_pool2d(y, 4).flatten(1)
    y = torch.nn.functional.linear(y, torch.from_numpy(FC_W), torch.from_numpy(FC_B))
    return (y + torch.from_numpy(np.asarray(offset, np.float32))).numpy()


def inputs(batch: int = 2):
    rng = np.random.default_rng(batch)
    return (rng.standard_normal((batch, 3, 8, 8)).astype(np.float32),
            rng.standard_normal((batch, 5)).astype(np.float32))


def test_the_model_matches_torch(graph):
    image, offset = inputs()
    np.testing.assert_allclose(graph(image, offset), torch_reference(image, offset), atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------ refused clearly

def test_wrong_number_of_inputs(graph):
    image, offset = inputs()
    with pytest.raises(InputError, match=r"takes 2 input\(s\) \['image', 'offset'\], got 3"):
        graph.run(image, offset, offset)
    with pytest.raises(InputError, match=r"missing input\(s\) \['offset'\]") as info:
        graph.run(image)
    assert info.value.input_name == "offset"
    with pytest.raises(InputError, match="missing input"):
        graph.run()


def test_unknown_and_repeated_input_names(graph):
    image, offset = inputs()
    with pytest.raises(InputError, match=r"unknown input 'images'; the model's inputs are \['image', 'offset'\]"):
        graph.run(images=image, offset=offset)
    with pytest.raises(InputError, match="'image' given twice"):
        graph.run(image, image=image, offset=offset)


@pytest.mark.parametrize("shape", [(3, 8, 8), (2, 3, 8, 8, 1), (2, 3, 9, 8), (2, 1, 8, 8), (2, 3, 8, 7), ()])
def test_wrong_rank_or_shape_names_the_input_and_both_shapes(graph, shape):
    _, offset = inputs()
    with pytest.raises(InputError) as info:
        graph.run(np.zeros(shape, np.float32), offset)
    error = info.value
    assert error.input_name == "image" and error.expected == (1, 3, 8, 8) and error.actual == shape
    assert f"'image' has shape {shape}" in str(error) and "(1,3,8,8)" in str(error)


@pytest.mark.parametrize("value", [np.array([["a"] * 5] * 2), np.zeros((2, 5), dtype=object),
                                   np.zeros((2, 5), dtype=np.complex64), np.zeros((2, 5), dtype="datetime64[s]"),
                                   "not an array", {"a": 1}])
def test_non_numeric_inputs_are_refused(graph, value):
    image, _ = inputs()
    with pytest.raises(InputError, match="'offset'"):
        graph.run(image, value)


def test_batch_zero_is_refused_clearly(graph):
    with pytest.raises(InputError, match=r"'image' has batch size 0 \(shape \(0, 3, 8, 8\)\)"):
        graph.run(np.zeros((0, 3, 8, 8), np.float32), np.zeros((0, 5), np.float32))


def test_ragged_nested_lists_are_refused(graph):
    image, _ = inputs()
    with pytest.raises(InputError, match="'offset'"):
        graph.run(image, [[1, 2, 3, 4, 5], [1, 2]])


# ------------------------------------------------------------------ accepted and converted

@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32, np.int64, np.uint8, np.int8, np.bool_])
def test_other_numeric_dtypes_are_converted_to_float32(graph, dtype):
    image, offset = inputs()
    image = (image * 3).astype(dtype)
    offset = offset.astype(dtype)
    out = graph(image, offset)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, torch_reference(image, offset), atol=1e-4, rtol=1e-4)


def test_torch_tensors_and_nested_lists_are_accepted(graph):
    image, offset = inputs(1)
    expected = torch_reference(image, offset)
    np.testing.assert_allclose(graph(torch.from_numpy(image), offset.tolist()), expected, atol=1e-5, rtol=1e-5)


def test_non_contiguous_and_read_only_arrays(graph):
    image, offset = inputs(4)
    expected = torch_reference(image, offset)
    transposed = np.ascontiguousarray(image.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)   # F-order-like strides
    strided = np.repeat(offset, 2, axis=0)[::2]                                             # a stepped view
    fortran = np.asfortranarray(image)
    for a, b in [(transposed, strided), (fortran, offset)]:
        assert not a.flags.c_contiguous or not b.flags.c_contiguous
        np.testing.assert_allclose(graph(a, b), expected, atol=1e-5, rtol=1e-5)
    frozen_image, frozen_offset = image.copy(), offset.copy()
    frozen_image.flags.writeable = frozen_offset.flags.writeable = False
    np.testing.assert_allclose(graph(frozen_image, frozen_offset), expected, atol=1e-5, rtol=1e-5)
    big_endian = image.astype(">f4")
    np.testing.assert_allclose(graph(big_endian, offset), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int64])
def test_the_callers_array_is_never_modified(graph, dtype):
    image, offset = inputs(3)
    image, offset = (image * 2).astype(dtype), offset.astype(dtype)
    saved = image.copy(), offset.copy()
    graph(image, offset)
    graph.run({"image": image, "offset": offset})
    np.testing.assert_array_equal(image, saved[0])
    np.testing.assert_array_equal(offset, saved[1])


def test_outputs_do_not_alias_the_inputs(graph):
    image, offset = inputs(1)
    out = graph(image, offset)
    assert not np.shares_memory(out, image) and not np.shares_memory(out, offset)


# ------------------------------------------------------------------ NaN and Inf

@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_nan_and_inf_propagate_as_in_torch(graph, value):
    image, offset = inputs(3)
    image[0, 1, 2, 3] = value        # through conv, relu, pool, linear
    offset[1, 2] = value             # through the expression only
    offset[2, :] = [np.inf, -np.inf, np.nan, np.inf, 0]
    ours, expected = graph(image, offset), torch_reference(image, offset)
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(expected))
    np.testing.assert_array_equal(np.isposinf(ours), np.isposinf(expected))
    np.testing.assert_array_equal(np.isneginf(ours), np.isneginf(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(ours[finite], expected[finite], atol=1e-5, rtol=1e-5)


def test_float64_values_beyond_float32_become_inf_as_in_torch(graph):
    image, offset = inputs(1)
    offset = offset.astype(np.float64)
    offset[0, 0] = 1e300
    with np.errstate(over="ignore"):
        out = graph(image, offset)
    assert out[0, 0] == np.inf and np.isfinite(out[0, 1:]).all()
