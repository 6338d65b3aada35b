"""`kuiper profile`, `kuiper bench` and `kuiper graph`, and the benchmark and DOT code behind them."""

import io
import json
import re
import shutil

import numpy as np
import pytest
from cli_runner import DEMO, run, usage_error

import kuiperinfer
from kuiperinfer.benchmark import BenchmarkResult, PeakMemory, benchmark, blas_description
from kuiperinfer.cli._progress import ProgressBar
from kuiperinfer.visualize import family_of, output_format, to_dot

COMPUTED = [op.name for op in kuiperinfer.load(DEMO).operators if op.layer is not None]
"""The operators that run, in order, once the optimiser has fused the activations."""
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")


# -- kuiper profile ----------------------------------------------------------------------

def test_profile_table_lists_every_operator_by_time(capsys):
    code, out, err = run(capsys, "profile", str(DEMO), "--runs", "3", "--warmup-runs", "1", "--top", "0")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "demo_cnn.pnnx.param: batch 1, 3 timed runs after 1 warm-up runs"
    assert re.fullmatch(r"\d+\.\d{3} ms per run, \d+\.\d{3} ms \(\d+\.\d%\) inside operators", lines[1])
    assert lines[3].split() == ["#", "operator", "type", "output", "ms/run", "median", "share"]
    rows = [line.split() for line in lines[4:4 + len(COMPUTED)]]
    assert [int(row[0]) for row in rows] == list(range(1, len(COMPUTED) + 1))
    assert sorted(row[1] for row in rows) == sorted(COMPUTED)
    times = [float(row[4]) for row in rows]
    assert times == sorted(times, reverse=True)
    assert sum(float(row[6].rstrip("%")) for row in rows) == pytest.approx(100, abs=0.5)
    conv = next(row for row in rows if row[1] == "convbn2d_0")
    assert conv[2:4] == ["nn.Conv2d", "(1,16,32,32)"]
    by_type = lines[5 + len(COMPUTED):]
    assert by_type[0].split() == ["type", "operators", "ms/run", "share"]
    assert any(line.split()[:2] == ["nn.Conv2d", "3"] for line in by_type)


def test_profile_top_and_batch(capsys):
    code, out, _ = run(capsys, "profile", str(DEMO), "--runs", "2", "--top", "3", "--batch", "2")
    assert code == 0
    assert "batch 2, 2 timed runs after 2 warm-up runs" in out
    assert re.search(rf"^\.\.\. {len(COMPUTED) - 3} more operators, \d+\.\d% of the time \(--top 0 lists all\)$",
                     out, re.M)
    # with two threads the batch is cut into a chunk of one sample per thread
    split = kuiperinfer.load(DEMO).threads > 1
    assert ("(1,16,32,32)" if split else "(2,16,32,32)") in out


def test_profile_adds_up_the_time_of_every_thread(capsys):
    """Each of the bundled model's samples takes milliseconds, so the helper takes the second
    one (the demo model's take a fraction of one, which the caller may finish first)."""
    code, out, _ = run(capsys, "profile", "--runs", "3", "--warmup-runs", "1", "--top", "1", "--batch", "2")
    assert code == 0
    threads = kuiperinfer.load(DEMO).threads
    assert ("added up over 2 threads" in out) == (threads > 1)


def test_profile_trace_is_one_run_in_trace_event_format(capsys, tmp_path):
    trace = tmp_path / "trace.json"
    code, out, _ = run(capsys, "profile", str(DEMO), "--runs", "2", "--trace", str(trace))
    assert code == 0 and f"wrote one run as a trace to {trace}" in out
    events = json.loads(trace.read_text())["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert complete[0]["name"] == "forward" and complete[0]["cat"] == "graph"
    operators = complete[1:]
    assert [e["name"] for e in operators] == COMPUTED
    assert operators[0]["cat"] == "nn.Conv2d"
    assert operators[0]["args"] == {"inputs": [[1, 3, 64, 64]], "outputs": [[1, 16, 32, 32]]}
    assert all(isinstance(e["ts"], float) and e["dur"] > 0 for e in operators)
    assert all(0 <= e["ts"] and e["ts"] + e["dur"] <= complete[0]["dur"] for e in operators)
    assert [e["ts"] for e in operators] == sorted(e["ts"] for e in operators)
    assert {e["name"] for e in events if e["ph"] == "M"} == {"process_name", "thread_name"}


def test_profile_json(capsys, tmp_path):
    code, out, _ = run(capsys, "profile", str(DEMO), "--runs", "2", "--json", "--trace", str(tmp_path / "t.json"))
    assert code == 0 and (tmp_path / "t.json").exists()
    data = json.loads(out)                                 # nothing but the JSON on stdout
    assert data["runs"] == 2 and data["batch"] == 1 and data["warmup_runs"] == 2
    assert sorted(op["name"] for op in data["operators"]) == sorted(COMPUTED)
    assert data["operator_ms_per_run"] <= data["wall_ms_per_run"]
    assert sum(t["operators"] for t in data["types"]) == len(COMPUTED)


def test_profile_progress_bar_over_runs(capsys):
    code, _, err = run(capsys, "profile", str(DEMO), "--runs", "3", "--progress")
    assert code == 0
    assert err == "".join(f"\rprofiling [{'#' * (10 * i) + '.' * (30 - 10 * i)}] {i}/3 runs"
                          for i in (1, 2, 3)) + "\n"


@pytest.mark.parametrize("argv, message", [
    (["--runs", "0"], "argument --runs: must be at least 1, got 0"),
    (["--warmup-runs", "-1"], "argument --warmup-runs: must be 0 or more, got -1"),
    (["--top", "x"], "argument --top: expected a whole number, got 'x'"),
])
def test_profile_refuses_bad_options(capsys, argv, message):
    assert message in usage_error(capsys, "profile", *argv)


# -- kuiper bench ------------------------------------------------------------------------

def test_bench_reports_latency_throughput_and_memory(capsys):
    code, out, err = run(capsys, "bench", str(DEMO), "--runs", "4", "--warmup-runs", "1", "--batch", "2")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "demo_cnn.pnnx.param: batch 2, 4 timed runs after 1 warm-up runs"
    assert re.fullmatch(rf"threads: +{kuiperinfer.load(DEMO).threads}, BLAS .+, 1 thread in a run", lines[1])
    assert re.fullmatch(r"load: +\d+\.\d ms, \+\d+(\.\d)? (B|KiB|MiB) resident set \(its warm-up run included\)",
                        lines[2])
    numbers = re.fullmatch(r"latency: +min (\S+) ms  median (\S+) ms  p90 (\S+) ms  mean (\S+) ms", lines[3])
    low, median, p90, mean = map(float, numbers.groups())
    assert 0 < low <= median <= p90 and low <= mean
    assert re.fullmatch(r"throughput:  \d+\.\d items/s", lines[4])
    assert re.fullmatch(r"peak memory: \+\d+(\.\d)? (B|KiB|MiB) resident set growth during the runs "
                        r"\(.+\)", lines[5])


def test_bench_threads_are_the_runs_threads(capsys):
    """--threads T loads the model on T threads; BLAS stays on one thread in the runs."""
    code, out, _ = run(capsys, "bench", str(DEMO), "--runs", "2", "--threads", "1", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["threads"] == 1 and data["blas"].endswith(", 1 thread")


def test_earlier_spellings_of_options_still_work_and_warn(capsys):
    code, out, err = run(capsys, "profile", str(DEMO), "--runs", "2", "--warmup", "1", "--seed", "3", "--json")
    assert code == 0 and json.loads(out)["warmup_runs"] == 1
    assert "--warmup is deprecated: use --warmup-runs" in err and "--seed is deprecated: use --input-seed" in err


def test_bench_json(capsys):
    code, out, _ = run(capsys, "bench", str(DEMO), "--runs", "3", "--json")
    assert code == 0
    data = json.loads(out)
    assert (data["batch"], data["runs"], data["warmup_runs"]) == (1, 3, 3)
    latency = data["latency_ms"]
    assert latency["min"] <= latency["median"] <= latency["p90"]
    assert data["throughput_items_per_s"] == pytest.approx(1e3 / latency["mean"])
    assert data["peak_rss_growth_bytes"] >= 0 and data["memory_method"] and data["blas"]
    assert data["load_ms"] > 0 and isinstance(data["load_rss_growth_bytes"], int)


def test_bench_progress_bar(capsys):
    code, _, err = run(capsys, "bench", str(DEMO), "--runs", "2", "--warmup-runs", "0", "--progress")
    assert code == 0 and err.startswith("\rbenchmarking [") and err.endswith("] 2/2 runs\n")


def test_benchmark_result_statistics():
    result = BenchmarkResult(batch=4, warmup_runs=0, latencies_s=(0.004, 0.001, 0.002, 0.003, 0.010),
                             peak_rss_growth=0, memory_method="test")
    assert (result.min_s, result.median_s, result.mean_s) == (0.001, 0.003, 0.004)
    assert result.p90_s == pytest.approx(0.0076)            # between the two largest, as numpy's percentile
    assert result.throughput == pytest.approx(4 * 5 / 0.020)


def test_benchmark_runs_the_graph():
    graph = kuiperinfer.load(DEMO)
    calls = []
    result = benchmark(graph, [np.zeros((3, 3, 64, 64), np.float32)], runs=2, warmup_runs=0,
                       progress=lambda done, total: calls.append(done))
    assert calls == [1, 2] and result.batch == 3 and len(result.latencies_s) == 2
    with pytest.raises(ValueError):
        benchmark(graph, [np.zeros((1, 3, 64, 64), np.float32)], runs=0)


def test_peak_memory_sees_a_short_lived_allocation():
    with PeakMemory() as memory:
        # 64 MiB, touched, then freed: above glibc's largest mmap threshold (32 MiB), so it
        # is always fresh memory, never a free block the heap already holds resident.
        block = np.ones(64 * 1024 * 1024 // 8)
        del block
    assert memory.growth >= 60 * 1024 * 1024
    assert memory.method
    with PeakMemory() as memory:
        pass
    assert memory.growth < 8 * 1024 * 1024


def test_blas_description_names_the_library_and_threads():
    assert re.search(r", \d+ threads?$", blas_description())


# -- kuiper graph ------------------------------------------------------------------------

def test_graph_dot_has_every_operator_and_operand(capsys, tmp_path):
    code, out, _ = run(capsys, "graph", str(DEMO), "-o", str(tmp_path / "demo.dot"))
    assert code == 0 and out == f"wrote {tmp_path / 'demo.dot'}\n"
    dot = (tmp_path / "demo.dot").read_text()
    assert dot == to_dot(DEMO)
    assert dot.startswith("digraph model {") and "rankdir=TB" in dot
    nodes = re.findall(r"^  (op\d+) \[label=<(.*?)>,", dot, re.M)
    assert len(nodes) == 14
    labels = dict(nodes)
    assert labels["op1"] == ('<b>nn.Conv2d</b><br/><font point-size="9">convbn2d_0</font>'
                             '<br/><font point-size="9">(1,16,32,32)</font>')
    assert "add(@0,@1)" in labels["op6"]                               # the expression's formula
    assert labels["op0"].startswith("<b>input pnnx_input_0</b>")
    edges = re.findall(r"^  (op\d+) -> (op\d+)(?: \[label=\" (\S+)\"\])?;$", dot, re.M)
    assert len(edges) == 14
    assert ("op2", "op6", "(1,16,32,32)") in edges and ("op12", "op13", "(1,10)") in edges


def test_graph_prints_dot_without_output(capsys):
    code, out, _ = run(capsys, "graph", str(DEMO))
    assert code == 0 and out == to_dot(DEMO)


def test_graph_colours_by_family():
    assert family_of("nn.Conv2d") == family_of("F.conv_transpose2d") == ("convolution", "#cfe2ff")
    assert family_of("torch.mm")[0] == family_of("torch.addmm")[0] == family_of("nn.Linear")[0] == \
        "matrix product"
    assert family_of("nn.BatchNorm2d")[0] == "normalisation"
    assert family_of("F.max_pool2d")[0] == family_of("nn.ZeroPad2d")[0] == "pooling and resampling"
    assert family_of("nn.Hardswish")[0] == family_of("F.gelu")[0] == "activation"
    assert family_of("Tensor.view")[0] == family_of("Tensor.to")[0] == "shape and data movement"
    assert family_of("torch.topk") == ("other", "#ffffff")
    dot = to_dot(DEMO)
    assert re.search(r'convbn2d_0.*fillcolor="#cfe2ff"', dot)
    assert re.search(r'input pnnx_input_0.*shape=oval, fillcolor="#343a40"', dot)


def test_graph_escapes_names():
    from kuiperinfer.pnnx import parse_param

    graph = parse_param('7767517\n2 1\npnnx.Input in<&> 0 1 0 #0=(1,2)f32\n'
                        'pnnx.Output out"x 1 0 0 #0=(1,2)f32\n')
    dot = to_dot(graph, title='a "model"')
    assert "input in&lt;&amp;&gt;" in dot and 'label="a \\"model\\""' in dot


@needs_dot
@pytest.mark.parametrize("suffix, magic", [(".svg", b"<?xml"), (".png", b"\x89PNG"), (".pdf", b"%PDF")])
def test_graph_renders_with_graphviz(capsys, tmp_path, suffix, magic):
    out_path = tmp_path / f"demo{suffix}"
    code, _, err = run(capsys, "graph", str(DEMO), "-o", str(out_path))
    assert code == 0 and err == ""
    assert out_path.read_bytes().startswith(magic)


def test_graph_without_graphviz_says_how_to_install_it(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name, *args, **kwargs: None)
    code, out, err = run(capsys, "graph", str(DEMO), "-o", str(tmp_path / "demo.svg"))
    assert code == 2 and out == ""
    assert "apt-get install graphviz" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "demo.svg").exists()
    code, _, _ = run(capsys, "graph", str(DEMO), "-o", str(tmp_path / "demo.dot"))     # DOT needs no Graphviz
    assert code == 0 and (tmp_path / "demo.dot").exists()


def test_graph_refuses_an_unknown_format(capsys, tmp_path):
    code, _, err = run(capsys, "graph", str(DEMO), "-o", str(tmp_path / "demo.jpg"))
    assert code == 2 and "use one of .dot, .gv, .svg, .png, .pdf" in err
    assert output_format("x.GV") == "dot" and output_format("x.Svg") == "svg"


def test_bench_refuses_zero_threads(capsys):
    assert "argument --threads: must be at least 1, got 0" in usage_error(capsys, "bench", "--threads", "0")


# -- the progress bar ----------------------------------------------------------------------

def test_progress_bar_redraws_one_line():
    stream = io.StringIO()
    with ProgressBar("testing", "steps", stream, width=4) as bar:
        bar(1, 2)
        bar(2, 2)
    assert stream.getvalue() == "\rtesting [##..] 1/2 steps\rtesting [####] 2/2 steps\n"
    quiet = io.StringIO()
    ProgressBar("testing", "steps", quiet).close()
    assert quiet.getvalue() == ""
