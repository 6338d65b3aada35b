"""A run's threads: a batch cut into chunks the threads take, and single samples whose large
operators share their parts, give the single-thread results."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from oracle import Lambda, check_op, export, torch_outputs
from test_concurrency import run_threads

import kuiperinfer
from kuiperinfer.kernels import parallel
from kuiperinfer.runtime.graph import RuntimeGraph


class SmallNet(nn.Module):
    """Conv, BN, activations, pooling, a residual Expression, cat on channels, flatten, linear."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(2)
        self.fc = nn.Linear(64, 5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.relu(self.bn(self.conv1(x)))
        y = torch.cat((F.hardswish(self.conv2(y)) + y, y), 1)
        features = torch.flatten(self.pool(y[:, :16]), 1)
        return torch.softmax(self.fc(features), 1), torch.max_pool2d(y, 2)


class RecordingGraph(RuntimeGraph):
    """Notes the threads that ran operators."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ran_on: set[str] = set()

    def run_node(self, op, inputs):
        self.ran_on.add(threading.current_thread().name)
        return super().run_node(op, inputs)


@pytest.fixture(scope="module")
def small_net(tmp_path_factory):
    torch.manual_seed(0)
    model = SmallNet().eval()
    return model, export(model, (torch.rand(1, 3, 12, 12),), tmp_path_factory.mktemp("threads"))


def images(batch: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 3, 12, 12), dtype=np.float32)


def test_load_defaults(small_net):
    _, param = small_net
    assert kuiperinfer.load(param).threads == parallel.cores()
    assert kuiperinfer.load(param, optimize=False).threads == parallel.cores()   # options are separate
    assert kuiperinfer.load(param, optimize=False, threads=3).threads == 3
    assert kuiperinfer.load(param).batching.independent


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("batch", [1, 2, 3, 8])
def test_threads_give_the_single_thread_results(small_net, batch, threads):
    model, param = small_net
    serial = kuiperinfer.load(param, threads=1)
    parallel = kuiperinfer.load(param, threads=threads)
    x = images(batch)
    expected = serial.run(x)
    got = parallel.run(x)
    for a, b in zip(got, expected):
        assert a.shape == b.shape and a.dtype == np.float32
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
    for a, b in zip(got, torch_outputs(model, (torch.from_numpy(x),))):
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=1e-3)


def test_batch_chunks_are_taken_by_the_engines_threads(small_net):
    _, param = small_net
    graph = RecordingGraph(param, threads=2)
    graph.build()
    graph.run(images(1))
    assert graph.ran_on == {threading.current_thread().name}
    for _ in range(20):   # a helper that wakes late may leave every chunk to the caller
        graph.run(images(8))
        if any(name.startswith("kuiper-intra-op") for name in graph.ran_on):
            break
    assert any(name.startswith("kuiper-intra-op") for name in graph.ran_on)


@pytest.mark.parametrize("fn", [
    lambda x: x - x.mean(0, keepdim=True),
    lambda x: torch.cat((x, x * 2), 0).relu(),
    lambda x: torch.softmax(x, 0),
], ids=["mean-over-batch", "cat-on-batch", "softmax-over-batch"])
def test_graph_mixing_samples_runs_whole(tmp_path, fn):
    module = Lambda(fn)
    param = export(module, (torch.rand(2, 3, 4),), tmp_path)
    graph = RecordingGraph(param, threads=2)
    graph.build()
    assert not graph.batching.independent
    x = torch.randn(6, 3, 4, generator=torch.Generator().manual_seed(1))
    np.testing.assert_allclose(graph(x.numpy()), fn(x).numpy(), atol=1e-5, rtol=1e-4)
    assert graph.ran_on == {threading.current_thread().name}


def test_a_vector_viewed_as_complex_runs_whole(tmp_path):
    """A 1-d input's pairs are its only dimension: cut into chunks it would lose them."""
    param = tmp_path / "m.pnnx.param"
    param.write_text("7767517\n3 2\npnnx.Input in0 0 1 in0 #in0=(2)f32\n"
                     "torch.view_as_complex op 1 1 in0 out #in0=(2)f32\npnnx.Output output 1 0 out\n")
    graph = kuiperinfer.load(param, threads=2)
    assert not graph.batching.independent
    with pytest.raises(kuiperinfer.KuiperError, match="last dimension of 2"):
        graph(np.arange(4, dtype=np.float32))
    assert graph(np.array([1.0, 2.0], np.float32)) == 1 + 2j


def test_many_callers_share_one_graph_of_two_threads(small_net):
    _, param = small_net
    graph = kuiperinfer.load(param, threads=2)
    inputs = [images(batch, seed=batch) for batch in (1, 2, 3, 5, 8, 4, 7, 6)]
    expected = [kuiperinfer.load(param, threads=1).run(x) for x in inputs]

    def calls(i: int) -> list[list[np.ndarray]]:
        return [graph.run(inputs[i]) for _ in range(10)]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(calls, range(8)))
    for i, runs in enumerate(results):
        for outputs in runs:
            for a, b in zip(outputs, expected[i]):
                np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)


BLAS_WHILE_A_POOL_LIVES = """
import gc, sys
from concurrent.futures import ThreadPoolExecutor
import numpy as np
from threadpoolctl import threadpool_info
import kuiperinfer

def blas():
    return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]

before = blas()
graph = kuiperinfer.load(sys.argv[1], threads=2)
x = np.random.default_rng(0).random((8, 3, 12, 12), dtype=np.float32)
with ThreadPoolExecutor(4) as callers:
    list(callers.map(lambda _: graph.run(x), range(8)))
during = blas()
del graph
gc.collect()
print(before, during, blas())
"""


def test_blas_runs_on_one_thread_while_a_pool_lives_and_is_restored_after(small_net):
    """Holding the limit for the pool's life, not per run: a new process with 2 BLAS threads."""
    _, param = small_net
    environment = {**os.environ, "OPENBLAS_NUM_THREADS": "2", "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", BLAS_WHILE_A_POOL_LIVES, str(param)], capture_output=True,
                          text=True, env=environment, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "[2] [1] [2]"


def test_threads_must_be_positive(small_net):
    _, param = small_net
    with pytest.raises(kuiperinfer.KuiperError, match="threads"):
        kuiperinfer.load(param, threads=0)


class PerSampleShapes(nn.Module):
    """Shape operators that keep samples apart: pad, reshape with the batch in front,
    permute and transpose that leave dimension 0, split, chunk and slices on other dimensions."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        y = F.pad(self.conv(x), (0, 1, 0, 1))
        y = y.reshape(x.size(0), 4, -1).permute(0, 2, 1)            # (N, 25, 4)
        a, b = torch.split(y, [1, 3], dim=2)
        c, d = torch.chunk(b, 2, dim=1)
        return torch.cat([a.transpose(1, 2), c.transpose(1, 2)[:, :1], d.transpose(1, 2)[:, 1:2]], dim=2)


def test_shape_operators_that_keep_samples_apart_let_the_batch_split(tmp_path):
    graph = check_op(PerSampleShapes(), (1, 3, 6, 6), directory=tmp_path, batch=5)
    assert graph.batching.independent
    assert {"F.pad", "Tensor.reshape", "Tensor.permute", "torch.transpose", "torch.split",
            "torch.chunk", "Tensor.slice"} <= {op.type for op in graph.operators}


def test_single_samples_share_their_large_operators_among_the_threads(tmp_path, monkeypatch):
    """A single sample runs whole; the 64-channel convolutions on 96x96 (57M multiply-adds
    each) share their parts among both threads, in Python or compiled parts, the small ones
    stay in the caller's."""
    shared = []
    share, run_compiled = parallel.ThreadPool.share, parallel.CompiledParts.run
    monkeypatch.setattr(parallel.ThreadPool, "share",
                        lambda pool, parts, run, threads: shared.append(threads) or share(pool, parts, run, threads))

    def compiled(self, count, work, head, tail, kinds=None):
        shared.append(min(parallel.threads_for(work), count))
        run_compiled(self, count, work, head, tail, kinds)
    monkeypatch.setattr(parallel.CompiledParts, "run", compiled)
    large = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1))
    small = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1))
    for model, size, shares in ((large, 96, True), (small, 16, False)):
        directory = tmp_path / str(size)
        directory.mkdir()
        param = export(model, (torch.rand(1, 3, size, size),), directory)
        graph = kuiperinfer.load(param, threads=2)
        x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(size))
        with torch.no_grad():
            expected = model(x).numpy()
        shared.clear()
        np.testing.assert_allclose(graph(x.numpy()), expected, atol=1e-4, rtol=1e-4)
        assert (max(shared, default=1) == 2) is shares


def test_threads_calling_a_graph_of_large_operators_get_the_serial_results(tmp_path):
    """Single samples share their large operators among the threads (and BLAS is limited
    meanwhile) while other threads run batches split over the same threads."""
    model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1),
                          nn.ReLU(), nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.Flatten(1), nn.Linear(32 * 32 * 32, 10))
    graph = kuiperinfer.load(export(model, (torch.rand(1, 3, 64, 64),), tmp_path), threads=2)
    inputs = [np.random.default_rng(i).standard_normal((1 + i % 2, 3, 64, 64)).astype(np.float32) for i in range(12)]
    expected = [graph(x) for x in inputs]
    got: list = [None] * len(inputs)

    def work(t: int) -> None:
        for i in range(t, len(inputs), 4):
            got[i] = graph(inputs[i])

    run_threads(work, count=4)
    for i, (ours, reference) in enumerate(zip(got, expected)):
        np.testing.assert_array_equal(ours, reference, err_msg=f"call {i}")


def test_a_batch_cut_into_chunks_keeps_every_output_of_a_list(tmp_path):
    """A model returning a Python list (pnnx's ``[@0,@1]`` expression) has one graph output that
    unpacks to several arrays: each is joined over the chunks, none is dropped."""
    module = Lambda(lambda x: [x * 2, torch.relu(x) + 1, x.sum(dim=1, keepdim=True)])
    param = export(module, (torch.rand(1, 3, 4),), tmp_path)
    x = torch.randn(5, 3, 4, generator=torch.Generator().manual_seed(3))
    expected = [y.numpy() for y in module(x)]
    for threads in (1, 2):
        got = kuiperinfer.load(param, threads=threads).run(x.numpy())
        assert len(got) == 3
        for ours, theirs in zip(got, expected):
            np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)
