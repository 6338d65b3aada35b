"""Engines in their own processes, timed in alternating blocks: the order, the protocol."""

import os
import threading
import time
from multiprocessing import Pipe

import numpy as np
import pytest

import benchmarks.alternate as alternate
from benchmarks.alternate import block_schedule, cpu_seconds, serve, start_all, time_alternating, wait_idle
from benchmarks.engines import Engine


def test_blocks_rotate_the_order_every_round_and_give_each_engine_its_runs():
    assert block_schedule(["a", "b", "c"], runs=7, block=3) == [
        ("a", 3), ("b", 3), ("c", 3),
        ("b", 3), ("c", 3), ("a", 3),
        ("c", 1), ("a", 1), ("b", 1)]
    assert block_schedule(["a", "b"], runs=2, block=5) == [("a", 2), ("b", 2)]


class FakeProcess:
    def __init__(self, pid, log):
        self.pid, self.log = pid, log

    def run_block(self, count):
        self.log.append(("run", self.pid, count))
        return [self.pid / 1000] * count


def test_one_engine_runs_at_a_time_and_its_process_settles_before_the_next():
    log = []
    processes = {"a": FakeProcess(1, log), "b": FakeProcess(2, log)}

    def settle(pid):
        log.append(("settle", pid))
        return pid / 10
    times, settled = time_alternating(processes, runs=4, block=2, settle=settle)
    assert log == [("settle", 1), ("settle", 2),
                   ("run", 1, 2), ("settle", 1), ("run", 2, 2), ("settle", 2),
                   ("run", 2, 2), ("settle", 2), ("run", 1, 2), ("settle", 1)]
    assert times == {"a": [0.001] * 4, "b": [0.002] * 4}
    assert settled == {"a": 0.1, "b": 0.2}


def serve_in_thread(monkeypatch, make_engine, warmup=1):
    monkeypatch.setattr(alternate, "make_engine", make_engine)
    parent, child = Pipe()
    inputs = {"input": np.ones((1, 2), np.float32)}
    thread = threading.Thread(target=serve, args=(child, "kuiperinfer", "int8", "mobilenetv3", "m.pnnx.param", None,
                                                  None, inputs, warmup, "m.table"))
    thread.start()
    return parent, thread


def test_the_engine_process_answers_with_its_output_then_times_blocks_until_told_to_stop(monkeypatch):
    calls = []

    def make_engine(engine, model, param, onnx_path, threads, precision, calibration):
        assert (engine, precision, str(param), onnx_path, str(calibration)) == (
            "kuiperinfer", "int8", "m.pnnx.param", None, "m.table")
        return Engine(lambda inputs: calls.append(1) or inputs["input"] * 2, "1 thread", "int8")
    parent, thread = serve_in_thread(monkeypatch, make_engine)
    kind, output, threads, precision = parent.recv()
    assert kind == "ready" and threads == "1 thread" and precision == "int8"
    np.testing.assert_array_equal(output, [[2, 2]])
    assert len(calls) == 2                         # the output, one warm-up run
    parent.send(3)
    assert len(parent.recv()) == 3
    assert len(calls) == 2 + 1 + 3                 # one untimed run opens the block
    parent.send(None)
    thread.join(5)
    assert not thread.is_alive()


def test_an_engine_that_cannot_load_says_why(monkeypatch):
    def make_engine(*args):
        raise RuntimeError("unsupported operator nn.Foo")
    parent, thread = serve_in_thread(monkeypatch, make_engine)
    assert parent.recv() == ("error", "RuntimeError: unsupported operator nn.Foo")
    thread.join(5)


def test_a_row_whose_model_file_could_not_be_made_fails_without_a_process():
    files = {"kuiperinfer": "export failed: RuntimeError: pnnx", "onnxruntime": "export failed: RuntimeError: onnx",
             "openvino": "export failed: RuntimeError: onnx", "onnx_int8": "int8 quantization failed: ValueError: x"}
    rows = [("kuiperinfer", "fp32"), ("kuiperinfer", "bf16"), ("openvino", "default"), ("onnxruntime", "int8")]
    processes, failed = start_all(rows, "mobilenetv3", files, None, {}, warmup=0)
    assert processes == {}
    assert failed == {("kuiperinfer", "fp32"): "export failed: RuntimeError: pnnx",
                      ("kuiperinfer", "bf16"): "export failed: RuntimeError: pnnx",
                      ("openvino", "default"): "export failed: RuntimeError: onnx",
                      ("onnxruntime", "int8"): "int8 quantization failed: ValueError: x"}


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads Linux's /proc")
def test_a_process_is_idle_once_its_threads_stop_computing():
    stop = time.perf_counter() + 0.15

    def spin():
        while time.perf_counter() < stop:
            pass
    spinner = threading.Thread(target=spin)
    before = cpu_seconds(os.getpid())
    spinner.start()
    waited = wait_idle(os.getpid())
    spinner.join()
    assert cpu_seconds(os.getpid()) > before
    assert 0.1 <= waited < 1.0
