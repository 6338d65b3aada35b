"""One built graph serving many threads at once.

8 threads x 50 calls, each with its own inputs (several batch sizes), must give exactly
the results of the same calls made one after another; errors in one thread must not
disturb the others.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from handmade import write_model

import kuiperinfer
from kuiperinfer.errors import InputError

THREADS = 8
CALLS = 50

# conv -> relu -> conv -> expression (residual) -> adaptive pool -> flatten -> linear ->
# split into a softmax and a sigmoid: several layers holding per-call values.
PARAM = """7767517
13 13
pnnx.Input               x                        0 1 0 #0=(1,3,8,8)f32
nn.Conv2d                conv1                    1 1 0 1 bias=True dilation=(1,1) groups=1 in_channels=3 kernel_size=(3,3) out_channels=4 padding=(1,1) padding_mode=zeros stride=(1,1) @bias=(4)f32 @weight=(4,3,3,3)f32 #0=(1,3,8,8)f32 #1=(1,4,8,8)f32
F.relu                   relu                     1 1 1 2 #1=(1,4,8,8)f32 #2=(1,4,8,8)f32
nn.Conv2d                conv2                    1 1 2 3 bias=True dilation=(1,1) groups=1 in_channels=4 kernel_size=(3,3) out_channels=4 padding=(1,1) padding_mode=zeros stride=(1,1) @bias=(4)f32 @weight=(4,4,3,3)f32 #2=(1,4,8,8)f32 #3=(1,4,8,8)f32
pnnx.Expression          residual                 2 1 3 2 4 expr=add(@0,mul(@1,0.5)) #3=(1,4,8,8)f32 #2=(1,4,8,8)f32 #4=(1,4,8,8)f32
F.adaptive_avg_pool2d    pool                     1 1 4 5 output_size=(2,2) #4=(1,4,8,8)f32 #5=(1,4,2,2)f32
torch.flatten            flatten                  1 1 5 6 end_dim=-1 start_dim=1 #5=(1,4,2,2)f32 #6=(1,16)f32
nn.Linear                fc                       1 1 6 7 bias=True in_features=16 out_features=5 @bias=(5)f32 @weight=(5,16)f32 #6=(1,16)f32 #7=(1,5)f32
torch.split              split                    1 2 7 8 9 dim=1 split_size_or_sections=(2,3) #7=(1,5)f32 #8=(1,2)f32 #9=(1,3)f32
F.softmax                softmax                  1 1 8 10 dim=1 #8=(1,2)f32 #10=(1,2)f32
F.sigmoid                sigmoid                  1 1 9 11 #9=(1,3)f32 #11=(1,3)f32
prim::TupleConstruct     tuple                    2 1 10 11 12 #10=(1,2)f32 #11=(1,3)f32
pnnx.Output              out                      1 0 12
"""
WEIGHTS = {"conv1.bias": (4,), "conv1.weight": (4, 3, 3, 3), "conv2.bias": (4,), "conv2.weight": (4, 4, 3, 3),
           "fc.bias": (5,), "fc.weight": (5, 16)}


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("threads"), PARAM, WEIGHTS)


def call_inputs(thread: int, call: int) -> np.ndarray:
    """Different inputs for every call; batch sizes 1 to 4 so split and whole runs mix."""
    rng = np.random.default_rng(1000 * thread + call)
    return rng.standard_normal((1 + (thread + call) % 4, 3, 8, 8)).astype(np.float32)


def run_threads(target, count: int = THREADS) -> None:
    """Start ``count`` threads on ``target(index)`` together; re-raise the first failure."""
    barrier = threading.Barrier(count)
    failures: list[BaseException] = []

    def body(index: int) -> None:
        try:
            barrier.wait()
            target(index)
        except BaseException as exc:  # reported in the main thread
            failures.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    if failures:
        raise failures[0]


@pytest.mark.parametrize("threads", [1, 2])
def test_threads_give_exactly_the_serial_results(model_path, threads):
    graph = kuiperinfer.load(model_path, threads=threads)
    expected = [[graph.run(call_inputs(t, c)) for c in range(CALLS)] for t in range(THREADS)]
    got: list[list] = [[None] * CALLS for _ in range(THREADS)]

    def work(t: int) -> None:
        for c in range(CALLS):
            got[t][c] = graph.run(call_inputs(t, c))

    run_threads(work)
    for t in range(THREADS):
        for c in range(CALLS):
            for ours, reference in zip(got[t][c], expected[t][c]):
                np.testing.assert_array_equal(ours, reference, err_msg=f"thread {t} call {c}")


def test_failing_calls_do_not_disturb_other_threads(model_path):
    graph = kuiperinfer.load(model_path)
    good = call_inputs(0, 0)
    expected = graph.run(good)

    def work(t: int) -> None:
        for _c in range(20):
            if t % 2:
                with pytest.raises(InputError):
                    graph.run(np.zeros((1, 3, 8, 9), np.float32))
            else:
                for ours, reference in zip(graph.run(good), expected):
                    np.testing.assert_array_equal(ours, reference)

    run_threads(work)


def test_many_graphs_loaded_in_parallel(model_path):
    x = call_inputs(0, 1)
    expected = kuiperinfer.load(model_path).run(x)

    def work(t: int) -> None:
        for _ in range(3):
            for ours, reference in zip(kuiperinfer.load(model_path).run(x), expected):
                np.testing.assert_array_equal(ours, reference)

    run_threads(work)
