"""The pooling kernels against PyTorch: in blocks of channels, rectangular windows, global
average pooling, in either memory layout, and bands of rows shared among threads."""

import threading
import time
from functools import partial

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pools import intra_op

from kuiperinfer.kernels import pooling
from kuiperinfer.kernels.layout import is_channels_last, nchw, nhwc
from kuiperinfer.kernels.pooling import BLOCK_BYTES, avg_pool2d, global_avg_pool2d, max_pool2d

RNG = np.random.default_rng(0)


def test_pooling_in_channel_blocks_matches_pytorch():
    x = RNG.standard_normal((2, 40, 120, 118), dtype=np.float32)  # several blocks of channels
    assert BLOCK_BYTES < x.nbytes // 4
    t = torch.from_numpy(x)
    np.testing.assert_array_equal(max_pool2d(x, (3, 3), (2, 2), (1, 1), (1, 1), True),
                                  F.max_pool2d(t, 3, 2, 1, ceil_mode=True).numpy())
    np.testing.assert_allclose(avg_pool2d(x, (2, 3), (2, 1), (1, 1), False, False, None),
                               F.avg_pool2d(t, (2, 3), (2, 1), 1, count_include_pad=False).numpy(),
                               atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("kernel, stride, padding, dilation, ceil_mode", [
    ((3, 2), (2, 1), (1, 0), (1, 1), False),    # two taps cover every output along the width only
    ((2, 3), (1, 3), (0, 1), (1, 1), True),
    ((3, 3), (2, 2), (1, 1), (2, 1), True),     # dilated rows: no tap covers every output row
    ((1, 4), (3, 2), (0, 2), (1, 2), False)])
def test_max_pooling_of_rectangular_windows_in_either_layout_matches_pytorch(
        kernel, stride, padding, dilation, ceil_mode, channels_last):
    x = RNG.standard_normal((2, 5, 13, 11), dtype=np.float32)
    source = nchw(np.ascontiguousarray(nhwc(x))) if channels_last else x
    expected = F.max_pool2d(torch.from_numpy(x), kernel, stride, padding, dilation, ceil_mode).numpy()
    np.testing.assert_array_equal(max_pool2d(source, kernel, stride, padding, dilation, ceil_mode), expected)


@pytest.mark.parametrize("channels_last", [False, True])
def test_global_average_pooling_in_either_layout_matches_pytorch(channels_last):
    x = RNG.standard_normal((3, 40, 13, 9), dtype=np.float32)
    source = nchw(np.ascontiguousarray(nhwc(x))) if channels_last else x
    expected = F.adaptive_avg_pool2d(torch.from_numpy(x), 1).numpy()[:, :, 0, 0]
    np.testing.assert_allclose(global_avg_pool2d(source), expected, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("kind, kernel, stride, padding, ceil_mode", [
    ("max", 3, 2, 1, False), ("max", 3, 2, 1, True), ("max", 5, 1, 2, False), ("avg", 3, 2, 1, True)])
def test_pooling_of_one_channels_last_image_shares_bands_of_rows_among_intra_op_threads(
        kind, kernel, stride, padding, ceil_mode, monkeypatch):
    threads, reduce_axis = set(), pooling._reduce_axis

    def recording(*args):
        time.sleep(0.02)   # long enough for the helper to wake and take a part too
        threads.add(threading.get_ident())
        reduce_axis(*args)

    monkeypatch.setattr(pooling, "_reduce_axis", recording)
    x = nchw(RNG.standard_normal((1, 14, 11, 8), dtype=np.float32))
    with intra_op(2, min_work=0):
        if kind == "max":
            ours = max_pool2d(x, (kernel,) * 2, (stride,) * 2, (padding,) * 2, (1, 1), ceil_mode)
        else:
            ours = avg_pool2d(x, (kernel,) * 2, (stride,) * 2, (padding,) * 2, ceil_mode, False, None)
    pool = F.max_pool2d if kind == "max" else partial(F.avg_pool2d, count_include_pad=False)
    expected = pool(torch.from_numpy(np.ascontiguousarray(x)), kernel, stride, padding, ceil_mode=ceil_mode)
    np.testing.assert_allclose(ours, expected.numpy(), atol=1e-6, rtol=1e-5)
    assert len(threads) == 2 and is_channels_last(ours)
