"""The transposed convolution whose stride equals its kernel, in blocks, against PyTorch."""

import threading
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pools import intra_op

from kuiperinfer.kernels import blockwise_transposed
from kuiperinfer.kernels.layout import nchw, nhwc

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("channels_last", [False, True])
def test_blockwise_transposed_convolution_matches_pytorch_in_blocks_shared_among_threads(channels_last,
                                                                                        monkeypatch):
    monkeypatch.setattr(blockwise_transposed, "BLOCK_BYTES", 4096)     # a few input rows per block
    x = RNG.standard_normal((2, 6, 9, 7), dtype=np.float32)
    weight = RNG.standard_normal((6, 5, 2, 3), dtype=np.float32)
    bias = RNG.standard_normal(5, dtype=np.float32)
    source = nchw(np.ascontiguousarray(nhwc(x))) if channels_last else x
    threads, matmul = set(), np.matmul

    def recording(*args, **kwargs):
        time.sleep(0.02)   # long enough for the helper to wake and take a part too
        threads.add(threading.get_ident())
        return matmul(*args, **kwargs)

    monkeypatch.setattr(blockwise_transposed.np, "matmul", recording)
    with intra_op(2, min_work=0):
        ours = blockwise_transposed.blockwise_conv_transpose2d(
            source, blockwise_transposed.pack_blockwise_weight(weight), (2, 3), bias)
    expected = F.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(weight), torch.from_numpy(bias),
                                  stride=(2, 3)).numpy()
    assert ours.shape == (2, 18, 21, 5) and ours.flags.c_contiguous
    np.testing.assert_allclose(nchw(ours), expected, atol=1e-5, rtol=1e-5)
    assert len(threads) == 2
