"""Channels-last memory: padding in NHWC, copies in bands of rows, concatenated channels."""

import threading
import time

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from oracle import check_op
from pools import intra_op

from kuiperinfer.kernels import layout
from kuiperinfer.kernels.compiled import layout as compiled_layout
from kuiperinfer.kernels.layout import is_channels_last, nchw, nhwc, pad_nhwc

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.uint16])
@pytest.mark.parametrize("shape", [(1, 3, 224, 224), (3, 5, 7, 2), (2, 1, 1, 9), (1, 64, 9, 9)])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_compiled_channels_last_copy_equals_numpys(dtype, shape, threads):
    x = RNG.integers(0, 255, shape).astype(dtype)
    with intra_op(threads, min_work=1):
        got = compiled_layout.channels_last(x)
        again = compiled_layout.channels_last(nchw(got))
    expected = np.ascontiguousarray(nhwc(x))
    assert got.flags.c_contiguous and got.dtype == dtype
    np.testing.assert_array_equal(got, expected)
    assert np.shares_memory(again, got)   # channels-last already: the view, no copy
    view = x[:, :, ::2, 1:]               # any strides
    np.testing.assert_array_equal(compiled_layout.channels_last(view), np.ascontiguousarray(nhwc(view)))


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("channels_last", [False, True])
def test_pad_nhwc_matches_pytorch_from_either_layout(mode, channels_last):
    x = RNG.standard_normal((2, 3, 5, 6), dtype=np.float32)
    source = nchw(np.ascontiguousarray(nhwc(x))) if channels_last else x
    assert is_channels_last(source) == channels_last
    ours = pad_nhwc(source, ((1, 2), (3, 0)), mode)
    expected = F.pad(torch.from_numpy(x), (3, 0, 1, 2), mode="constant" if mode == "zeros" else mode)
    assert ours.flags.c_contiguous
    np.testing.assert_array_equal(nchw(ours), expected.numpy())


def test_large_copies_go_in_bands_of_rows_shared_among_intra_op_threads(monkeypatch):
    threads, copyto = set(), np.copyto

    def recording(*args, **kwargs):
        time.sleep(0.02)   # long enough for the helper to wake and take a part too
        threads.add(threading.get_ident())
        copyto(*args, **kwargs)

    monkeypatch.setattr(layout.np, "copyto", recording)
    parts = [RNG.standard_normal((2, c, 7, 5), dtype=np.float32) for c in (3, 1, 4)]
    sources = [nchw(np.ascontiguousarray(nhwc(p))) for p in parts]
    with intra_op(2, min_work=0):
        joined = layout.concatenate_channels(sources)
        padded = pad_nhwc(parts[0], ((2, 0), (1, 3)))
    assert is_channels_last(joined) and len(threads) == 2
    np.testing.assert_array_equal(joined, np.concatenate(parts, axis=1))
    np.testing.assert_array_equal(nchw(padded), F.pad(torch.from_numpy(parts[0]), (1, 3, 2, 0)).numpy())


def test_concatenating_channels_last_images_keeps_them_channels_last(tmp_path):
    class ConvCat(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(3, 5, 1)

        def forward(self, x):
            return torch.cat((self.a(x), self.b(x), self.a(x)), dim=1)

    torch.manual_seed(0)
    check_op(ConvCat(), (1, 3, 9, 8), directory=tmp_path, batch=2)
