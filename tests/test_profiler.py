"""ProfilingGraph: timing every operator through the run_node hook; aggregation; Chrome traces."""

import json
import threading

import numpy as np
import pytest
from cli_runner import DEMO

import kuiperinfer
from kuiperinfer.errors import InferError
from kuiperinfer.pnnx.ir import INPUT_TYPE, OUTPUT_TYPE
from kuiperinfer.profiler import (
    NodeEvent,
    ProfilingGraph,
    RunRecord,
    chrome_trace,
    profile,
    summarize_runs,
    write_chrome_trace,
)


@pytest.fixture(scope="module")
def graph() -> ProfilingGraph:
    graph = ProfilingGraph(DEMO, threads=1)
    graph.build()
    return graph


def computed(graph) -> list[str]:
    """The operators a run computes, in execution order."""
    return [op.name for op in graph.operators if op.type not in (INPUT_TYPE, OUTPUT_TYPE)]


def image(batch: int = 1, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 3, 64, 64)).astype(np.float32)


def test_profiling_changes_no_output(graph):
    x = image(2)
    np.testing.assert_array_equal(graph(x), kuiperinfer.load(DEMO, optimize=False, threads=1)(x))


def test_every_operator_is_timed_in_execution_order(graph):
    graph.clear()
    graph.run(image(2))
    (record,) = graph.runs
    assert [e.name for e in record.events] == computed(graph)
    assert [e.type for e in record.events][:2] == ["nn.Conv2d", "nn.ReLU"]
    starts = [e.start_ns for e in record.events]
    assert starts == sorted(starts)
    assert all(e.duration_ns > 0 and record.start_ns <= e.start_ns and e.end_ns <= record.end_ns
               for e in record.events)
    first = record.events[0]
    assert first.input_shapes == ((2, 3, 64, 64),) and first.output_shapes == ((2, 16, 32, 32),)


def test_profile_records_the_timed_runs_only(graph):
    calls = []
    report = profile(graph, [image()], runs=3, warmup_runs=2,
                     progress=lambda done, total: calls.append((done, total)))
    assert calls == [(1, 3), (2, 3), (3, 3)]
    assert len(graph.runs) == 3 and report.runs == 3
    assert sorted(op.name for op in report.operators) == sorted(computed(graph))
    assert all(op.calls == 3 for op in report.operators)
    totals = [op.total_s for op in report.operators]
    assert totals == sorted(totals, reverse=True)
    assert report.operator_s <= report.wall_s
    conv = next(t for t in report.types if t.type == "nn.Conv2d")
    assert conv.operators == 3
    assert conv.total_s == pytest.approx(sum(op.total_s for op in report.operators if op.type == "nn.Conv2d"))


def test_recording_can_be_switched_off(graph):
    graph.clear()
    graph.recording = False
    try:
        graph.run(image())
    finally:
        graph.recording = True
    assert graph.runs == []


def test_threads_record_their_own_runs(graph):
    graph.clear()
    outputs = {}

    def work(seed: int) -> None:
        for _ in range(3):
            outputs[seed] = graph(image(1, seed))

    threads = [threading.Thread(target=work, args=(seed,)) for seed in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(graph.runs) == 6
    assert all([e.name for e in run.events] == computed(graph) for run in graph.runs)
    reference = kuiperinfer.load(DEMO, optimize=False, threads=1)
    for seed, output in outputs.items():
        np.testing.assert_array_equal(output, reference(image(1, seed)))


def test_a_failing_operator_raises_as_without_profiling():
    def broken(inputs):
        raise ValueError("broken on purpose")

    plain, profiled = kuiperinfer.load(DEMO, optimize=False, threads=1), ProfilingGraph(DEMO)
    profiled.build()
    for g in (plain, profiled):
        next(op for op in g.operators if op.name == "block.2").layer.forward = broken
    with pytest.raises(InferError) as expected:
        plain.run(image())
    with pytest.raises(InferError) as actual:
        profiled.run(image())
    assert str(actual.value) == str(expected.value) and "broken on purpose" in str(actual.value)
    (record,) = profiled.runs              # the run is kept, with the operators before the failing one
    assert [e.name for e in record.events] == computed(profiled)[:computed(profiled).index("block.2")]
    assert record.end_ns >= record.events[-1].end_ns


def synthetic_runs() -> list[RunRecord]:
    """Two runs of three operators with hand-picked times (nanoseconds)."""
    runs = []
    for offset, conv_ns in ((0, 300), (10_000, 500)):
        run = RunRecord(offset, offset + 2_000)
        run.events = [
            NodeEvent("conv", "nn.Conv2d", offset + 100, offset + 100 + conv_ns,
                      ((1, 3, 8, 8),), ((1, 4, 8, 8),)),
            NodeEvent("relu", "nn.ReLU", offset + 900, offset + 1_000, ((1, 4, 8, 8),), ((1, 4, 8, 8),)),
            NodeEvent("conv2", "nn.Conv2d", offset + 1_000, offset + 1_200, ((1, 4, 8, 8),), ((1, 2, 8, 8),)),
        ]
        runs.append(run)
    return runs


def test_summarize_runs_adds_up_exactly():
    report = summarize_runs(synthetic_runs())
    assert report.runs == 2 and report.wall_s == pytest.approx(4e-6)
    assert [(op.name, op.calls) for op in report.operators] == [("conv", 2), ("conv2", 2), ("relu", 2)]
    conv = report.operators[0]
    assert conv.total_s == pytest.approx(800e-9) and conv.median_s == pytest.approx(400e-9)
    assert conv.mean_s == pytest.approx(400e-9) and conv.output_shapes == ((1, 4, 8, 8),)
    assert [(t.type, t.operators) for t in report.types] == [("nn.Conv2d", 2), ("nn.ReLU", 1)]
    assert report.types[0].total_s == pytest.approx(1200e-9)
    assert report.operator_s == pytest.approx(1400e-9)
    data = report.to_dict()
    assert data["operators"][0]["ms_per_run"] == pytest.approx(400e-6)
    assert data["types"][1] == {"type": "nn.ReLU", "operators": 1, "ms_per_run": pytest.approx(100e-6)}
    with pytest.raises(ValueError):
        summarize_runs([])


def test_chrome_trace_of_one_run(tmp_path):
    run = synthetic_runs()[1]
    trace = chrome_trace(run, "model.pnnx.param")
    events = trace["traceEvents"]
    assert events[0] == {"name": "process_name", "ph": "M", "pid": 1, "tid": 1,
                         "args": {"name": "model.pnnx.param"}}
    complete = [e for e in events if e["ph"] == "X"]
    assert [(e["name"], e["cat"]) for e in complete] == \
        [("forward", "graph"), ("conv", "nn.Conv2d"), ("relu", "nn.ReLU"), ("conv2", "nn.Conv2d")]
    assert [(e["ts"], e["dur"]) for e in complete] == [(0.0, 2.0), (0.1, 0.5), (0.9, 0.1), (1.0, 0.2)]
    assert complete[1]["args"] == {"inputs": ((1, 3, 8, 8),), "outputs": ((1, 4, 8, 8),)}
    write_chrome_trace(run, tmp_path / "trace.json")
    loaded = json.loads((tmp_path / "trace.json").read_text())
    conv = next(e for e in loaded["traceEvents"] if e["name"] == "conv")
    assert conv["args"] == {"inputs": [[1, 3, 8, 8]], "outputs": [[1, 4, 8, 8]]}
    assert loaded["displayTimeUnit"] == "ms"


def test_profile_checks_its_arguments(graph):
    with pytest.raises(ValueError):
        profile(graph, [image()], runs=0)
    with pytest.raises(ValueError):
        profile(graph, [image()], runs=1, warmup_runs=-1)
