"""Resizing against PyTorch, each exported by pnnx: nn.Upsample / F.interpolate and relatives
in every mode, pixel (un)shuffle."""

import math

import numpy as np
import pytest
import torch.nn as nn
import torch.nn.functional as F
from handmade import make_operator
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from oracle import check_op

from kuiperinfer.errors import InferError, LayerCreateError
from kuiperinfer.layers import LayerRegisterer


def case_id(case: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in case.items())


def resize_all(cases: list[dict], **common):
    """One model that returns F.interpolate(x, **case, **common) for every case: one export, many checks."""
    return lambda x: tuple(F.interpolate(x, **case, **common) for case in cases)


SCALES_AND_SIZES = [
    dict(scale_factor=2), dict(scale_factor=3), dict(scale_factor=0.5), dict(scale_factor=(0.6, 1.3)),
    dict(scale_factor=1.1),      # the same size: PyTorch's 2-D nearest copies
    dict(scale_factor=2.1),      # a doubled size: PyTorch's 2-D nearest reads i // 2
    dict(scale_factor=1.7), dict(size=(8, 9)), dict(size=(4, 3)), dict(size=(1, 1)), dict(size=(11, 2)),
]


@pytest.mark.parametrize("mode,align_corners", [("nearest", None), ("nearest-exact", None),
                                                ("bilinear", False), ("bilinear", True),
                                                ("bicubic", False), ("bicubic", True)])
def test_interpolate_2d(mode, align_corners, tmp_path):
    check_op(resize_all(SCALES_AND_SIZES, mode=mode, align_corners=align_corners), (1, 3, 5, 7),
             directory=tmp_path, batch=2)


@pytest.mark.parametrize("mode", ["nearest", "bilinear", "bicubic"])
def test_interpolate_recompute_scale_factor(mode, tmp_path):
    # (nearest-exact with recompute_scale_factor=True: pnnx cannot export it)
    cases = [dict(scale_factor=1.5), dict(scale_factor=1.3), dict(scale_factor=0.45)]
    check_op(resize_all(cases, mode=mode, recompute_scale_factor=True), (1, 2, 7, 9), directory=tmp_path)


@pytest.mark.parametrize("mode,align_corners", [("nearest", None), ("nearest-exact", None),
                                                ("linear", False), ("linear", True)])
def test_interpolate_1d(mode, align_corners, tmp_path):
    cases = [dict(scale_factor=2.5), dict(scale_factor=1.1), dict(scale_factor=0.4), dict(size=12), dict(size=1)]
    check_op(resize_all(cases, mode=mode, align_corners=align_corners), (1, 3, 7), directory=tmp_path, batch=2)


@pytest.mark.parametrize("mode,align_corners", [("nearest", None), ("trilinear", False), ("trilinear", True)])
def test_interpolate_3d(mode, align_corners, tmp_path):
    cases = [dict(scale_factor=(2.0, 1.5, 0.7)), dict(scale_factor=1.3), dict(size=(3, 5, 2))]
    check_op(resize_all(cases, mode=mode, align_corners=align_corners), (1, 2, 3, 4, 5), directory=tmp_path)


@pytest.mark.parametrize("fn", [
    lambda x: F.upsample(x, scale_factor=2, mode="nearest"),
    lambda x: F.upsample(x, size=(6, 8), mode="bilinear", align_corners=False),
    lambda x: F.upsample_nearest(x, scale_factor=2),
    lambda x: F.upsample_bilinear(x, scale_factor=2),
    lambda x: F.upsample_bilinear(x, size=(7, 7)),
    lambda x: F.interpolate(x, size=(x.shape[2] * 2, x.shape[3] + 1)),     # frozen into size=
    nn.Upsample(scale_factor=2),
    nn.Upsample(size=(9, 4), mode="bicubic"),
    nn.UpsamplingNearest2d(scale_factor=2),
    nn.UpsamplingBilinear2d(scale_factor=1.5),
], ids=["upsample", "upsample-bilinear", "upsample_nearest", "upsample_bilinear", "upsample_bilinear-size",
        "size-from-shape", "Upsample", "Upsample-bicubic", "UpsamplingNearest2d", "UpsamplingBilinear2d"])
def test_resize_spellings(fn, tmp_path):
    check_op(fn, (1, 3, 5, 7), directory=tmp_path, batch=2)


# Scale factors with two decimals: pnnx writes floats with 9 significant digits, so a factor
# like 1.9999999999999996 reaches the .param file as 2.0 and floor(2 * 2.0) != floor(2 * 1.99..).
@settings(max_examples=12, deadline=None)
@given(mode=st.sampled_from(["nearest", "nearest-exact", "bilinear", "bicubic"]),
       align_corners=st.booleans(), recompute=st.booleans(),
       scale=st.tuples(st.integers(30, 300), st.integers(30, 300)).map(lambda s: (s[0] / 100, s[1] / 100)),
       hw=st.tuples(st.integers(2, 9), st.integers(2, 9)))
def test_interpolate_random_scales(mode, align_corners, recompute, scale, hw, tmp_path_factory):
    assume(min(math.floor(d * s) for d, s in zip(hw, scale)) >= 1)
    assume(not (mode == "nearest-exact" and recompute))  # pnnx cannot export it
    align = align_corners if mode in ("bilinear", "bicubic") else None
    check_op(lambda x: F.interpolate(x, scale_factor=scale, mode=mode, align_corners=align,
                                     recompute_scale_factor=recompute),
             (1, 2, *hw), directory=tmp_path_factory.mktemp("interp"))


@pytest.mark.parametrize("factor,shape", [(2, (1, 8, 3, 5)), (3, (1, 18, 2, 3)), (1, (1, 3, 4, 4))])
def test_pixel_shuffle(factor, shape, tmp_path):
    check_op(nn.PixelShuffle(factor), shape, directory=tmp_path, batch=2)


@pytest.mark.parametrize("factor,shape", [(2, (1, 2, 4, 6)), (3, (1, 3, 6, 9))])
def test_pixel_unshuffle(factor, shape, tmp_path):
    check_op(nn.PixelUnshuffle(factor), shape, directory=tmp_path, batch=2)


def test_functional_pixel_shuffle_round_trip(tmp_path):
    check_op(lambda x: F.pixel_shuffle(F.pixel_unshuffle(x, 2) * 2, 2), (1, 3, 6, 4), directory=tmp_path, batch=3)


# -- validation (operators made by hand: PyTorch itself refuses these models) --

@pytest.mark.parametrize("type_name,params,message", [
    ("F.upsample", dict(mode="area", size=(4, 4)), "unsupported mode"),
    ("F.upsample", dict(mode="bilinear"), "exactly one of size and scale_factor"),
    ("F.upsample", dict(mode="linear", size=(4,)), "needs 1 spatial axes"),
    ("F.interpolate", dict(mode="bilinear", size=(4, 4), antialias=True), "antialias"),
    ("F.upsample_nearest", dict(size=(4, 0)), "must be positive"),
    ("F.pixel_shuffle", dict(upscale_factor=0), "must be positive"),
])
def test_bad_parameters_raise_layer_create_error(type_name, params, message):
    with pytest.raises(LayerCreateError, match=message):
        LayerRegisterer.create_layer(make_operator(type_name, [[1, 4, 6, 6]], **params))


@pytest.mark.parametrize("type_name,params,shape", [
    ("F.pixel_shuffle", dict(upscale_factor=2), (1, 6, 3, 3)),
    ("F.pixel_unshuffle", dict(downscale_factor=2), (1, 2, 3, 4)),
])
def test_inputs_that_do_not_fit_raise_infer_error(type_name, params, shape):
    layer = LayerRegisterer.create_layer(make_operator(type_name, [list(shape)], **params))
    with pytest.raises(InferError):
        layer.forward([np.zeros(shape, dtype=np.float32)])
