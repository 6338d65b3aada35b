"""Interpolation in either memory layout against PyTorch, and its nearest-neighbour tables."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kuiperinfer.kernels.interpolate import interpolate, nearest_table, repeat_factor
from kuiperinfer.kernels.layout import is_channels_last, nchw, nhwc

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("size, mode", [((10, 21), "nearest"), ((9, 13), "nearest"), ((10, 14), "bilinear"),
                                        ((10, 14), "nearest-exact"), ((5, 14), "nearest")])
@pytest.mark.parametrize("channels_last", [False, True])
def test_interpolate_keeps_the_layout_and_matches_pytorch(size, mode, channels_last):
    x = RNG.standard_normal((2, 3, 5, 7), dtype=np.float32)
    source = nchw(np.ascontiguousarray(nhwc(x))) if channels_last else x
    ours = interpolate(source, size, "linear" if mode == "bilinear" else mode, False, (None, None))
    expected = F.interpolate(torch.from_numpy(x), size=size, mode=mode).numpy()
    assert is_channels_last(ours) == channels_last and ours.flags.c_contiguous != channels_last
    np.testing.assert_allclose(ours, expected, atol=1e-6, rtol=0)


def test_repeat_factor_recognises_whole_repetitions_only():
    assert repeat_factor(nearest_table(5, 15, 3.0, False, False), 5) == 3
    assert repeat_factor(nearest_table(5, 5, None, False, False), 5) == 1
    assert repeat_factor(nearest_table(5, 9, None, False, False), 5) is None    # not a whole multiple
    assert repeat_factor(nearest_table(6, 3, None, False, False), 6) is None    # skips samples
    assert repeat_factor(nearest_table(5, 1, None, False, False), 5) is None    # one sample of five
    assert repeat_factor(nearest_table(5, 10, None, True, False), 5) == 2       # nearest-exact doubles too
