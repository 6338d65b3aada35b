"""torchvision.ops.DeformConv2d and torchvision.ops.RoIAlign.

torchvision cannot be installed beside this torch, so no model holding them can be traced
and exported here. The models are written by hand in pnnx's form (the parameters and
input order of its pass_level1 ``torchvision_DeformConv2d.cpp`` and ``torchvision_RoIAlign.cpp``)
and compared with references written in this file from the operators' definitions:
deformable convolution through ``torch.nn.functional.grid_sample`` (bilinear, zeros
outside, pixel centres at the corners: torchvision's interpolation) and a plain
convolution over the sampled taps; RoIAlign as a loop over boxes, bins and samples.
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from handmade import make_operator, write_model

import kuiperinfer
from kuiperinfer.errors import InferError, LayerCreateError
from kuiperinfer.inspect.summary import summarize
from kuiperinfer.layers import LayerRegisterer


def shape_text(shape) -> str:
    return ",".join(str(d) for d in shape)


# -- deformable convolution --------------------------------------------------------------

def deform_conv2d_reference(x, offset, weight, bias, stride, padding, dilation, mask=None):
    """torchvision's deform_conv2d from its definition: every tap (i, j) of output (oy, ox)
    reads input channel c at (oy*sh - ph + i*dh + dy, ox*sw - pw + j*dw + dx), the offsets of
    c's offset group, bilinearly with zeros outside, times the mask; then a convolution."""
    n, channels, height, width = x.shape
    c_out, c_group, kh, kw = weight.shape
    groups = channels // c_group
    out_h, out_w = offset.shape[2:]
    offset_groups = offset.shape[1] // (2 * kh * kw)
    per_group = channels // offset_groups
    oy = torch.arange(out_h, dtype=torch.float32)[:, None] * stride[0] - padding[0]
    ox = torch.arange(out_w, dtype=torch.float32)[None, :] * stride[1] - padding[1]
    columns = torch.zeros(n, channels, kh * kw, out_h, out_w)
    for g in range(offset_groups):
        for tap in range(kh * kw):
            i, j = divmod(tap, kw)
            dy = offset[:, g * 2 * kh * kw + 2 * tap]
            dx = offset[:, g * 2 * kh * kw + 2 * tap + 1]
            y, xx = oy + i * dilation[0] + dy, ox + j * dilation[1] + dx
            grid = torch.stack((2 * xx / (width - 1) - 1, 2 * y / (height - 1) - 1), dim=-1)
            part = x[:, g * per_group:(g + 1) * per_group]
            sampled = F.grid_sample(part, grid, mode="bilinear", padding_mode="zeros", align_corners=True)
            if mask is not None:
                sampled = sampled * mask[:, g * kh * kw + tap][:, None]
            columns[:, g * per_group:(g + 1) * per_group, tap] = sampled
    cols = columns.reshape(n, groups, c_group * kh * kw, out_h * out_w)
    out = torch.matmul(weight.reshape(groups, c_out // groups, -1), cols).reshape(n, c_out, out_h, out_w)
    return out if bias is None else out + bias.reshape(-1, 1, 1)


def deform_model(directory, x_shape, offset_shape, mask_shape, weight, bias, stride, padding, dilation, groups):
    c_out, c_group, kh, kw = weight.shape
    inputs = [("x", x_shape), ("offset", offset_shape)] + ([("mask", mask_shape)] if mask_shape else [])
    out_shape = (x_shape[0], c_out, *offset_shape[2:])
    lines = [f"pnnx.Input in_{name} 0 1 {name} #{name}=({shape_text(shape)})f32" for name, shape in inputs]
    attrs = f"@weight=({shape_text(weight.shape)})f32" + (f" @bias=({c_out})f32" if bias is not None else "")
    lines.append(f"torchvision.ops.DeformConv2d dcn {len(inputs)} 1 {' '.join(n for n, _ in inputs)} y "
                 f"bias={bias is not None} dilation=({shape_text(dilation)}) groups={groups} "
                 f"in_channels={c_group * groups} kernel_size=({kh},{kw}) out_channels={c_out} "
                 f"padding=({shape_text(padding)}) stride=({shape_text(stride)}) {attrs} "
                 + " ".join(f"#{name}=({shape_text(shape)})f32" for name, shape in inputs)
                 + f" #y=({shape_text(out_shape)})f32")
    lines.append(f"pnnx.Output out 1 0 y #y=({shape_text(out_shape)})f32")
    param = f"7767517\n{len(lines)} {len(inputs) + 1}\n" + "\n".join(lines) + "\n"
    weights = {"dcn.weight": weight.numpy()}
    if bias is not None:
        weights["dcn.bias"] = bias.numpy()
    return write_model(directory, param, weights, name="dcn")


DEFORM_CASES = [
    dict(),
    dict(stride=(2, 2), padding=(1, 1)),
    dict(padding=(2, 1), dilation=(2, 1)),
    dict(groups=2, offset_groups=2, padding=(1, 1)),
    dict(offset_groups=4, kernel=(1, 3), padding=(0, 1)),
    dict(mask=True, padding=(1, 1)),
    dict(mask=True, offset_groups=2, groups=4, stride=(1, 2), bias=False),
]


@pytest.mark.parametrize("case", DEFORM_CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "plain")
def test_deform_conv2d(case, tmp_path):
    generator = torch.Generator().manual_seed(0)
    kh, kw = case.get("kernel", (3, 3))
    stride, padding, dilation = case.get("stride", (1, 1)), case.get("padding", (0, 0)), case.get("dilation", (1, 1))
    groups, offset_groups, channels = case.get("groups", 1), case.get("offset_groups", 1), 8
    weight = torch.randn(6 * groups // math.gcd(6, groups), channels // groups, kh, kw, generator=generator)
    bias = torch.randn(weight.shape[0], generator=generator) if case.get("bias", True) else None
    height, width = 9, 10
    out_hw = [(size + 2 * p - d * (k - 1) - 1) // s + 1
              for size, p, d, k, s in zip((height, width), padding, dilation, (kh, kw), stride)]
    x_shape = (1, channels, height, width)
    offset_shape = (1, 2 * offset_groups * kh * kw, *out_hw)
    mask_shape = (1, offset_groups * kh * kw, *out_hw) if case.get("mask") else None
    graph = kuiperinfer.load(deform_model(tmp_path, x_shape, offset_shape, mask_shape, weight, bias, stride, padding,
                                          dilation, groups))
    for batch in (1, 3):
        x = torch.randn(batch, *x_shape[1:], generator=generator)
        offset = torch.randn(batch, *offset_shape[1:], generator=generator) * 2   # taps well outside, too
        mask = torch.rand(batch, *mask_shape[1:], generator=generator) if mask_shape else None
        expected = deform_conv2d_reference(x, offset, weight, bias, stride, padding, dilation, mask)
        inputs = [x.numpy(), offset.numpy()] + ([mask.numpy()] if mask is not None else [])
        ours = graph.run(*inputs)[0]
        assert ours.dtype == np.float32 and ours.shape == tuple(expected.shape)
        np.testing.assert_allclose(ours, expected.numpy(), atol=1e-4, rtol=1e-3)


def test_deform_conv2d_without_offsets_is_a_convolution(tmp_path):
    generator = torch.Generator().manual_seed(1)
    weight, bias = torch.randn(4, 3, 3, 3, generator=generator), torch.randn(4, generator=generator)
    x = torch.randn(2, 3, 7, 6, generator=generator)
    graph = kuiperinfer.load(deform_model(tmp_path, (1, 3, 7, 6), (1, 18, 4, 3), None, weight, bias, (2, 2), (1, 1),
                                          (1, 1), 1))
    ours = graph.run(x.numpy(), np.zeros((2, 18, 4, 3), np.float32))[0]
    np.testing.assert_allclose(ours, F.conv2d(x, weight, bias, 2, 1).numpy(), atol=1e-4, rtol=1e-3)


def test_info_counts_deform_conv2d_like_a_convolution(tmp_path):
    weight = torch.randn(4, 3, 3, 3)
    path = deform_model(tmp_path, (1, 3, 7, 6), (1, 18, 5, 4), None, weight, None, (1, 1), (0, 0), (1, 1), 1)
    op, = (o for o in summarize(path).operators if o.type == "torchvision.ops.DeformConv2d")
    assert op.macs == 4 * 5 * 4 * 3 * 9


@pytest.mark.parametrize("inputs,params,message", [
    (1, dict(kernel_size=(3, 3), in_channels=4, out_channels=2), "takes \\(input, offset"),
    (2, dict(kernel_size=(3, 3), in_channels=4, out_channels=2, groups=3), "divisible by groups"),
    (2, dict(kernel_size=(3, 3), in_channels=4, out_channels=2, stride=(0, 1)), "must be positive"),
    (2, dict(kernel_size=(3, 3), in_channels=4, out_channels=2), "missing weight"),
])
def test_deform_conv2d_refuses_bad_parameters(inputs, params, message):
    shapes = [[1, 4, 6, 6], [1, 18, 4, 4]][:inputs]
    with pytest.raises(LayerCreateError, match=message):
        LayerRegisterer.create_layer(make_operator("torchvision.ops.DeformConv2d", shapes, **params))


def test_deform_conv2d_refuses_bad_inputs(tmp_path):
    weight = torch.randn(2, 4, 3, 3)
    graph = kuiperinfer.load(deform_model(tmp_path, (1, 4, 6, 6), (1, 18, 4, 4), None, weight, None, (1, 1), (0, 0),
                                          (1, 1), 1))
    layer = next(op.layer for op in graph.operators if op.type == "torchvision.ops.DeformConv2d")
    x = np.zeros((1, 4, 6, 6), np.float32)
    with pytest.raises(InferError, match="offset of shape"):
        layer.forward([x, np.zeros((1, 17, 4, 4), np.float32)])
    with pytest.raises(InferError, match="offset of shape"):
        layer.forward([x, np.zeros((1, 18, 3, 4), np.float32)])
    with pytest.raises(InferError, match="mask of shape"):
        layer.forward([x, np.zeros((1, 18, 4, 4), np.float32), np.zeros((1, 8, 4, 4), np.float32)])


# -- RoIAlign ------------------------------------------------------------------------------

def roi_align_reference(features, rois, output_size, spatial_scale, sampling_ratio, aligned):
    """torchvision's roi_align from its definition, one sample at a time (float32 like its kernel)."""
    f32 = np.float32
    features = features.astype(np.float64)
    n, channels, height, width = features.shape
    pooled_h, pooled_w = output_size
    out = np.zeros((len(rois), channels, pooled_h, pooled_w))

    def bilinear(image, y, x):
        if not (-1.0 <= y <= height and -1.0 <= x <= width):
            return np.zeros(channels)
        y, x = max(y, 0.0), max(x, 0.0)
        y_low, x_low = int(y), int(x)
        if y_low >= height - 1:
            y_low = y_high = height - 1
            y = float(y_low)
        else:
            y_high = y_low + 1
        if x_low >= width - 1:
            x_low = x_high = width - 1
            x = float(x_low)
        else:
            x_high = x_low + 1
        ly, lx = y - y_low, x - x_low
        return ((1 - ly) * (1 - lx) * image[:, y_low, x_low] + (1 - ly) * lx * image[:, y_low, x_high]
                + ly * (1 - lx) * image[:, y_high, x_low] + ly * lx * image[:, y_high, x_high])

    for k, (b, *box) in enumerate(rois):
        shift = f32(0.5 if aligned else 0.0)
        x1, y1, x2, y2 = (f32(v) * f32(spatial_scale) - shift for v in box)
        roi_w, roi_h = x2 - x1, y2 - y1
        if not aligned:
            roi_w, roi_h = max(roi_w, f32(1)), max(roi_h, f32(1))
        bin_h, bin_w = roi_h / f32(pooled_h), roi_w / f32(pooled_w)
        grid_h = sampling_ratio if sampling_ratio > 0 else math.ceil(roi_h / f32(pooled_h))
        grid_w = sampling_ratio if sampling_ratio > 0 else math.ceil(roi_w / f32(pooled_w))
        count = max(grid_h * grid_w, 1)
        for ph in range(pooled_h):
            for pw in range(pooled_w):
                total = np.zeros(channels)
                for iy in range(grid_h):
                    y = y1 + f32(ph) * bin_h + f32(iy + 0.5) * bin_h / f32(grid_h)
                    for ix in range(grid_w):
                        x = x1 + f32(pw) * bin_w + f32(ix + 0.5) * bin_w / f32(grid_w)
                        total += bilinear(features[int(b)], float(y), float(x))
                out[k, :, ph, pw] = total / count
    return out.astype(np.float32)


def roi_model(directory, features_shape, k, output_size, spatial_scale, sampling_ratio, aligned):
    out_shape = (k, features_shape[1], *output_size)
    param = ("7767517\n4 3\n"
             f"pnnx.Input in0 0 1 x #x=({shape_text(features_shape)})f32\n"
             f"pnnx.Input in1 0 1 rois #rois=({k},5)f32\n"
             f"torchvision.ops.RoIAlign roi 2 1 x rois y aligned={aligned} output_size=({shape_text(output_size)}) "
             f"sampling_ratio={sampling_ratio} spatial_scale={spatial_scale} #x=({shape_text(features_shape)})f32 "
             f"#rois=({k},5)f32 #y=({shape_text(out_shape)})f32\n"
             f"pnnx.Output out 1 0 y #y=({shape_text(out_shape)})f32\n")
    return write_model(directory, param, {}, name="roi")


ROI_CASES = [
    dict(output_size=(2, 2), spatial_scale=1.0, sampling_ratio=2, aligned=False),
    dict(output_size=(3, 4), spatial_scale=0.5, sampling_ratio=0, aligned=False),   # adaptive sample counts
    dict(output_size=(3, 3), spatial_scale=0.25, sampling_ratio=-1, aligned=True),
    dict(output_size=(7, 7), spatial_scale=1.0, sampling_ratio=0, aligned=True),
    dict(output_size=(2, 3), spatial_scale=0.5, sampling_ratio=3, aligned=True),
]


@pytest.mark.parametrize("case", ROI_CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_roi_align(case, tmp_path):
    rng = np.random.default_rng(0)
    features = rng.standard_normal((2, 3, 10, 12)).astype(np.float32)
    scale = 1 / case["spatial_scale"]
    corners = rng.uniform(-2, 13, (9, 4)) * scale
    boxes = np.concatenate([np.minimum(corners[:, :2], corners[:, 2:]), np.maximum(corners[:, :2], corners[:, 2:])],
                           axis=1)
    boxes[0] = [1, 1, 1.3, 1.2]                                  # smaller than a pixel
    boxes[1] = [-5 * scale, -5 * scale, 20 * scale, 20 * scale]  # around the whole image and beyond
    boxes[2] = [4, 3, 2, 1]                                      # malformed: x2 < x1
    rois = np.concatenate([rng.integers(0, 2, (9, 1)), boxes], axis=1).astype(np.float32)
    graph = kuiperinfer.load(roi_model(tmp_path, (1, 3, 10, 12), 9, **case))
    ours = graph.run(features, rois)[0]
    expected = roi_align_reference(features, rois, **case)
    assert ours.dtype == np.float32 and ours.shape == expected.shape
    np.testing.assert_allclose(ours, expected, atol=1e-5, rtol=1e-4)


def test_roi_align_takes_a_list_of_boxes_per_image():
    layer = LayerRegisterer.create_layer(make_operator("torchvision.ops.RoIAlign", [[2, 3, 8, 8], [4, 5]],
                                                       output_size=(2, 2), sampling_ratio=2, aligned=True,
                                                       spatial_scale=1))
    features = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    per_image = [np.array([[0, 0, 4, 4]], np.float32), np.array([[1, 2, 6, 7], [0, 0, 7, 7]], np.float32)]
    rows = np.array([[0, 0, 0, 4, 4], [1, 1, 2, 6, 7], [1, 0, 0, 7, 7]], np.float32)
    np.testing.assert_array_equal(layer.forward([features, per_image])[0], layer.forward([features, rows])[0])
    with pytest.raises(InferError, match="names image"):
        layer.forward([features, np.array([[2, 0, 0, 1, 1]], np.float32)])
    with pytest.raises(InferError, match=r"\(K, 5\)"):
        layer.forward([features, np.zeros((3, 4), np.float32)])


@pytest.mark.parametrize("params,message", [
    (dict(output_size=(2, 2), sampling_ratio=2), "spatial_scale"),
    (dict(output_size=(0, 2), sampling_ratio=2, spatial_scale=1), "output_size"),
    (dict(output_size=(2, 2), spatial_scale=1), "sampling_ratio"),
])
def test_roi_align_refuses_bad_parameters(params, message):
    with pytest.raises(LayerCreateError, match=message):
        LayerRegisterer.create_layer(make_operator("torchvision.ops.RoIAlign", [[1, 3, 8, 8], [4, 5]], **params))
