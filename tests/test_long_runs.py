"""Long runs: memory stays flat over many calls, nothing leaks per load.

RSS is read from /proc/self/statm and open file descriptors from /proc/self/fd, so these
tests run on Linux only.
"""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path

import numpy as np
import pytest
from handmade import write_model

import kuiperinfer
from kuiperinfer.errors import BinArchiveError
from kuiperinfer.runtime.memory import keep_freed_memory

pytestmark = pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs Linux /proc")

PARAM = """7767517
6 5
pnnx.Input               x                        0 1 0 #0=(1,3,16,16)f32
nn.Conv2d                conv1                    1 1 0 1 bias=True dilation=(1,1) groups=1 in_channels=3 kernel_size=(3,3) out_channels=8 padding=(1,1) padding_mode=zeros stride=(1,1) @bias=(8)f32 @weight=(8,3,3,3)f32 #0=(1,3,16,16)f32 #1=(1,8,16,16)f32
F.relu                   relu                     1 1 1 2 #1=(1,8,16,16)f32 #2=(1,8,16,16)f32
nn.Conv2d                conv2                    1 1 2 3 bias=True dilation=(1,1) groups=2 in_channels=8 kernel_size=(3,3) out_channels=8 padding=(1,1) padding_mode=zeros stride=(2,2) @bias=(8)f32 @weight=(8,4,3,3)f32 #2=(1,8,16,16)f32 #3=(1,8,8,8)f32
nn.Conv2d                conv3                    1 1 3 4 bias=False dilation=(1,1) groups=1 in_channels=8 kernel_size=(1,1) out_channels=4 padding=(0,0) padding_mode=zeros stride=(1,1) @weight=(4,8,1,1)f32 #3=(1,8,8,8)f32 #4=(1,4,8,8)f32
pnnx.Output              out                      1 0 4
"""
WEIGHTS = {"conv1.bias": (8,), "conv1.weight": (8, 3, 3, 3), "conv2.bias": (8,), "conv2.weight": (8, 4, 3, 3),
           "conv3.weight": (4, 8, 1, 1)}


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("long"), PARAM, WEIGHTS)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_two_thousand_calls_do_not_grow_memory(model_path):
    graph = kuiperinfer.load(model_path)
    inputs = [np.random.default_rng(i).standard_normal((1 + i % 3, 3, 16, 16)).astype(np.float32)
              for i in range(8)]
    for i in range(200):                       # warm-up: caches, allocator pools, thread pools
        graph(inputs[i % 8])
    gc.collect()
    before = rss_bytes()
    for i in range(2000):
        graph(inputs[i % 8])
    gc.collect()
    after = rss_bytes()
    # a few percent of the process, and never more than the size of a handful of calls' values
    assert after - before < max(0.03 * before, 4 * 1024 * 1024), (before, after)


def test_loading_and_dropping_graphs_leaks_no_file_handles_or_threads(model_path):
    x = np.ones((2, 3, 16, 16), np.float32)
    expected = kuiperinfer.load(model_path)(x)
    gc.collect()
    fds, threads = open_fds(), threading.active_count()
    for _ in range(500):
        graph = kuiperinfer.load(model_path)
        if _ % 50 == 0:
            np.testing.assert_array_equal(graph(x), expected)   # threads start their threads
        del graph
    gc.collect()
    assert open_fds() <= fds
    assert threading.active_count() <= threads + 1


def test_failed_loads_leak_no_file_handles(tmp_path):
    write_model(tmp_path, PARAM, {k: v for k, v in WEIGHTS.items() if k != "conv3.weight"})
    gc.collect()
    fds = open_fds()
    for _ in range(200):
        with pytest.raises(BinArchiveError, match="conv3.weight"):
            kuiperinfer.load(tmp_path / "m.pnnx.param")
    gc.collect()
    assert open_fds() <= fds


def test_optimised_runs_reuse_freed_memory_without_page_faults(tmp_path):
    """load() keeps freed memory in the process (kuiperinfer.runtime.memory): after warm-up,
    runs on 8 MB activations take their memory from the heap, not from fresh pages (the
    same 5 runs fault about 7,600 times with glibc's default settings)."""
    resource = pytest.importorskip("resource")
    if not keep_freed_memory():
        pytest.skip("needs glibc")
    large = PARAM.replace("16,16", "512,512").replace("8,8)", "256,256)")
    graph = kuiperinfer.load(write_model(tmp_path, large, WEIGHTS), threads=1)
    x = np.random.default_rng(0).standard_normal((1, 3, 512, 512), dtype=np.float32)
    for _ in range(3):
        graph(x)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        graph(x)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert faults < 50, f"{faults} page faults in 5 runs"
