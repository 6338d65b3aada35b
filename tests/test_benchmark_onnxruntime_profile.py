"""onnxruntime's per-node profile, read from its JSON events."""

from benchmarks.onnxruntime_profile import NodeTime, node_times, report


def kernel_event(name, op, shape, microseconds):
    return {"cat": "Node", "name": f"{name}_kernel_time", "dur": microseconds,
            "args": {"op_name": op, "output_type_shape": [{"float": list(shape)}]}}


def test_node_times_are_medians_of_the_timed_runs_largest_first():
    events = [{"cat": "Session", "name": "model_run", "dur": 99999}]
    for conv, pool in ((9000, 900), (1000, 100), (3000, 300), (2000, 200)):   # a warm-up run, then 3 timed
        events += [kernel_event("conv", "Conv", (1, 8, 4, 4), conv),
                   {"cat": "Node", "name": "conv_fence_before", "dur": 5},
                   kernel_event("pool", "MaxPool", (1, 8, 2, 2), pool)]
    assert node_times(events, runs=3) == [NodeTime("conv", "Conv", (1, 8, 4, 4), 2.0),
                                          NodeTime("pool", "MaxPool", (1, 8, 2, 2), 0.2)]


def test_report_lists_nodes_and_totals_per_type():
    nodes = [NodeTime("a", "Conv", (1, 4), 3.0), NodeTime("b", "Conv", (1, 4), 0.5),
             NodeTime("c", "Relu", (1, 4), 0.5)]
    text = report(nodes, top=2)
    assert text.splitlines()[0] == "4.000 ms per run in nodes (sum of medians)"
    assert "1 more node, 12.5% of the time" in text
    assert any(line.split()[:3] == ["Conv", "2", "3.500"] for line in text.splitlines())
