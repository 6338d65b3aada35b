"""`kuiper info`, `kuiper check` and `kuiper run`, and the model summary and support check behind them."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
from cli_runner import DEMO, run, usage_error
from oracle import Holder, export

import kuiperinfer
from kuiperinfer.cli import main as kuiper
from kuiperinfer.inspect import check_support, shape_text, summarize
from kuiperinfer.models import default_model_path

DEMO_OPERATORS = ["pnnx_input_0", "convbn2d_0", "stem.2", "convbn2d_1", "block.2", "block.3",
                  "pnnx_expr_2", "F.relu_1", "pool", "head.0", "torch.flatten_0", "head.2",
                  "F.softmax_2", "pnnx_output_0"]
# demo_cnn by hand: a 3x3 conv 3->16 with stride 2 to 32x32, a depthwise 3x3, a 1x1 16->16, a linear 16->10
DEMO_WEIGHTS = (16 * 3 * 9 + 16) + (16 * 9 + 16) + (16 * 16 + 16) + (10 * 16 + 10)
DEMO_MACS = 16 * 32 * 32 * 27 + 16 * 32 * 32 * 9 + 16 * 32 * 32 * 16 + 10 * 16
DEMO_FLOPS = 2 * DEMO_MACS + 3 * 16 * 32 * 32 + 10          # plus the bias additions


@pytest.fixture
def broken(tmp_path) -> Path:
    """demo_cnn with an operator type that has no layer and two convolutions their layer refuses."""
    text = DEMO.read_text()
    text = text.replace("nn.ReLU                  stem.2", "nn.Frobnicate            stem.2")
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if " convbn2d_1 " in line:
            lines[i] = line.replace("padding_mode=zeros", "padding_mode=bogus")
        if " block.3 " in line:
            lines[i] = line.replace("groups=1 ", "groups=3 ")
    path = tmp_path / "broken.pnnx.param"
    path.write_text("\n".join(lines) + "\n")
    shutil.copy(DEMO.with_suffix(".bin"), tmp_path / "broken.pnnx.bin")
    return path


class Products(nn.Module):
    """Every operator whose compute is estimated, and a second input."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.up = nn.ConvTranspose2d(4, 6, 3, stride=2, groups=2)
        self.fc = nn.Linear(4, 5, bias=False)
        self.m = nn.Parameter(torch.rand(4, 7))

    def forward(self, x, y):
        a = self.conv(x)
        return (self.up(a), self.fc(a.permute(0, 2, 3, 1)), torch.matmul(a, a.transpose(2, 3)),
                torch.addmm(y @ self.m, y, self.m), torch.bmm(a.flatten(2), a.flatten(2).transpose(1, 2)))


@pytest.fixture(scope="module")
def products(tmp_path_factory) -> Path:
    return export(Products(), (torch.rand(1, 3, 8, 8), torch.rand(4, 4)), tmp_path_factory.mktemp("products"))


# -- the summary -------------------------------------------------------------------------

def test_summary_of_the_demo_model():
    summary = summarize(DEMO)
    assert [op.name for op in summary.operators] == DEMO_OPERATORS
    conv = summary.operators[1]
    assert (conv.type, conv.line, conv.input_shapes, conv.output_shapes) == \
        ("nn.Conv2d", 4, ((1, 3, 64, 64),), ((1, 16, 32, 32),))
    assert (conv.parameters, conv.weight_bytes, conv.macs) == (448, 448 * 4, 16 * 32 * 32 * 27)
    assert summary.parameters == DEMO_WEIGHTS and summary.weight_bytes == 4 * DEMO_WEIGHTS
    assert (summary.macs, summary.flops) == (DEMO_MACS, DEMO_FLOPS)
    assert summary.operators[2].macs is None                         # a ReLU is not estimated
    assert list(summary.type_counts.items())[:2] == [("nn.Conv2d", 3), ("nn.ReLU", 2)]


def test_macs_of_every_estimated_operator(products):
    macs = sorted((op.type, op.macs) for op in summarize(products).operators if op.macs is not None)
    assert macs == sorted([
        ("nn.Conv2d", 4 * 8 * 8 * 3 * 9),
        ("nn.ConvTranspose2d", 4 * 8 * 8 * 3 * 9),   # every input element reaches 6/2 channels x 3x3
        ("nn.Linear", 8 * 8 * 5 * 4),
        ("torch.matmul", 4 * 8 * 8 * 8),             # a @ a.T
        ("torch.matmul", 4 * 7 * 4),                 # y @ m
        ("torch.addmm", 4 * 7 * 4),
        ("torch.bmm", 4 * 4 * 64),
    ])


class Recurrent(nn.Module):
    """An LSTM with every option that changes its cost, a batch-first GRU, an unbatched RNN."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 6, num_layers=2, bidirectional=True, proj_size=3)
        self.gru = nn.GRU(6, 5, batch_first=True, bias=False)
        self.rnn = nn.RNN(4, 3)

    def forward(self, x, y, z):
        return self.lstm(x)[0], self.gru(y)[0], self.rnn(z)[0]


def recurrent_macs(gates: int, input_size: int, hidden: int, steps: int, layers: int = 1,
                   directions: int = 1, proj: int = 0) -> int:
    """Per time step, layer and direction: the gates' products with the input and the state
    (and the projection of h)."""
    state = proj or hidden
    per_step = sum(directions * (gates * hidden * (input_size if k == 0 else directions * state)
                                 + gates * hidden * state + hidden * proj) for k in range(layers))
    return steps * per_step


def test_macs_of_recurrent_layers(tmp_path):
    path = export(Recurrent(), (torch.rand(7, 2, 4), torch.rand(2, 5, 6), torch.rand(7, 4)), tmp_path)
    ops = {op.type: op for op in summarize(path).operators}
    assert ops["nn.LSTM"].macs == recurrent_macs(4, 4, 6, 7 * 2, layers=2, directions=2, proj=3)
    assert ops["nn.GRU"].macs == recurrent_macs(3, 6, 5, 2 * 5)
    assert ops["nn.RNN"].macs == recurrent_macs(1, 4, 3, 7)
    assert ops["nn.LSTM"].flops == 2 * ops["nn.LSTM"].macs + 7 * 2 * 2 * 2 * (2 * 4 * 6)   # b_ih and b_hh
    assert ops["nn.GRU"].flops == 2 * ops["nn.GRU"].macs                                  # no bias


def test_recurrent_flops_are_pnnx_count_without_the_gates_elementwise(capfd, tmp_path):
    path = export(Holder(nn.LSTM(4, 6, num_layers=2, bidirectional=True)), (torch.rand(7, 2, 4),), tmp_path)
    match = re.search(r"^FLOPS = ([0-9.]+)([KMG]?)$", capfd.readouterr().err, re.M)
    if match is None:
        pytest.skip("this pnnx build prints no FLOPS")
    scale = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[match.group(2)]
    elementwise = 7 * 2 * 2 * 2 * 10 * 6      # steps x layers x directions x 10 per hidden unit
    assert summarize(path).flops + elementwise == pytest.approx(float(match.group(1)) * scale, abs=scale / 1000)


def test_flops_agree_with_the_count_pnnx_prints(capfd, tmp_path):
    path = export(Products(), (torch.rand(1, 3, 8, 8), torch.rand(4, 4)), tmp_path)
    printed = capfd.readouterr().err                        # pnnx prints from C++ to stderr
    match = re.search(r"^FLOPS = ([0-9.]+)([KMG]?)$", printed, re.M)
    if match is None:
        pytest.skip("this pnnx build prints no FLOPS")
    scale = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[match.group(2)]
    assert summarize(path).flops == pytest.approx(float(match.group(1)) * scale, abs=scale / 1000)


def test_shape_text():
    assert shape_text((1, 3, 224, 224)) == "(1,3,224,224)"
    assert shape_text((-1, 3)) == "(?,3)"
    assert shape_text(()) == "-"


# -- kuiper info -------------------------------------------------------------------------

def test_info_prints_every_operator_with_shapes_and_the_totals(capsys):
    code, out, err = run(capsys, "info", str(DEMO))
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["operator", "type", "inputs", "outputs", "params", "MACs"]
    rows = {line.split()[0]: line.split() for line in lines[1:len(DEMO_OPERATORS) + 1]}
    assert list(rows) == DEMO_OPERATORS
    assert rows["convbn2d_0"] == ["convbn2d_0", "nn.Conv2d", "(1,3,64,64)", "(1,16,32,32)", "448", "442K"]
    assert rows["pnnx_expr_2"][2:5] == ["(1,16,32,32)", "(1,16,32,32)", "(1,16,32,32)"]
    assert rows["head.2"][-2:] == ["170", "160"]
    assert rows["stem.2"][-1] == "(1,16,32,32)"                      # no params, no MACs
    assert "operators:  14 (3 nn.Conv2d, 2 nn.ReLU, 1 F.relu" in out
    assert f"parameters: {DEMO_WEIGHTS:,} (4.1 KiB of weights)" in out
    assert "compute:    852K MACs, 1.75M FLOPs" in out and "input shapes (1,3,64,64)" in out


def test_info_json_is_the_summary(capsys):
    code, out, _ = run(capsys, "info", str(DEMO), "--json")
    assert code == 0
    data = json.loads(out)
    assert data["totals"]["parameters"] == DEMO_WEIGHTS
    assert data["totals"]["macs"] == DEMO_MACS and data["totals"]["flops"] == DEMO_FLOPS
    assert data["totals"]["types"]["nn.Conv2d"] == 3
    assert [op["name"] for op in data["operators"]] == DEMO_OPERATORS
    assert data["operators"][1]["output_shapes"] == [[1, 16, 32, 32]]


def test_info_needs_neither_the_layers_nor_the_weights(capsys, broken):
    broken.with_suffix(".bin").unlink()
    code, out, _ = run(capsys, "info", str(broken))
    assert code == 0
    assert re.search(r"^stem\.2 +nn\.Frobnicate ", out, re.M)
    assert f"parameters: {DEMO_WEIGHTS:,}" in out


# -- kuiper check ------------------------------------------------------------------------

def test_check_passes_the_demo_model(capsys):
    code, out, err = run(capsys, "check", str(DEMO))
    assert code == 0 and err == ""
    assert out == f"{DEMO}: all 12 operators are supported; the model will run.\n"


def test_check_lists_every_problem_not_only_the_first(capsys, broken):
    code, out, _ = run(capsys, "check", str(broken))
    assert code == 1
    assert out.startswith(f"{broken}: 3 of 12 operators cannot be built; the model will not run.")
    assert "operator types with no layer:\n  nn.Frobnicate: 1 operator (stem.2)" in out
    assert re.search(r"closest registered types: .*nn\.Flatten", out)
    assert "convbn2d_1 (nn.Conv2d, line 6): unsupported padding_mode 'bogus'" in out
    assert re.search(r"block\.3 \(nn\.Conv2d, line 8\): .*groups 3", out)


def test_check_json_and_the_library_report(capsys, broken):
    code, out, _ = run(capsys, "check", str(broken), "--json")
    assert code == 1
    data = json.loads(out)
    assert data["runnable"] is False and data["operators"] == 12
    assert [(t["type"], t["operators"]) for t in data["unsupported_types"]] == [("nn.Frobnicate", ["stem.2"])]
    assert [(p["name"], p["line"]) for p in data["problems"]] == [("convbn2d_1", 6), ("block.3", 8)]
    report = check_support(broken)
    assert report.failing_operators == 3 and not report.runnable
    assert report.problems[0].status == "kParameterMissingPadding"


def test_check_groups_the_operators_of_an_unknown_type(capsys, tmp_path):
    text = DEMO.read_text().replace("nn.ReLU                 ", "nn.Frobnicate           ")
    (tmp_path / "m.pnnx.param").write_text(text)
    shutil.copy(DEMO.with_suffix(".bin"), tmp_path / "m.pnnx.bin")
    code, out, _ = run(capsys, "check", str(tmp_path / "m.pnnx.param"))
    assert code == 1 and "nn.Frobnicate: 2 operators (stem.2, block.2)" in out


@pytest.mark.parametrize("command", ["info", "check", "run", "profile", "bench", "graph"])
def test_missing_and_malformed_models_exit_2(capsys, tmp_path, command):
    code, out, err = run(capsys, command, str(tmp_path / "absent.pnnx.param"))
    assert code == 2 and out == ""
    assert err == f"kuiper {command}: error: no such model file: {tmp_path / 'absent.pnnx.param'}\n"
    bad = tmp_path / "bad.pnnx.param"
    bad.write_text("7767517\n1 1\nnn.ReLU relu 1\n")
    code, out, err = run(capsys, command, str(bad))
    assert code == 2 and out == "" and err.startswith(f"kuiper {command}: error: {bad}:3: ")
    assert len(err.splitlines()) == 1


def test_check_without_the_weights_archive_exits_2(capsys, broken):
    broken.with_suffix(".bin").unlink()
    code, _, err = run(capsys, "check", str(broken))
    assert code == 2 and "archive not found" in err


# -- kuiper run --------------------------------------------------------------------------

def test_run_prints_a_summary_of_each_output(capsys):
    code, out, err = run(capsys, "run", str(DEMO))
    assert code == 0 and err == ""
    head, values = out.splitlines()
    assert re.fullmatch(r"output 12: shape \(1, 10\) dtype float32  min \S+  max \S+  mean 0\.1  std \S+",
                        head)
    assert values.startswith("  values: [") and values.endswith("... (2 more)")


def test_commands_without_a_model_use_the_bundled_efficientnet(capsys):
    code, out, err = run(capsys, "run")
    assert code == 0 and err == ""
    assert out.startswith("output ") and "shape (1, 1000) dtype float32" in out
    code, out, _ = run(capsys, "check")
    assert code == 0 and out.startswith(str(default_model_path())) and "the model will run" in out


def test_run_writes_the_outputs_by_name(capsys, tmp_path):
    code, out, _ = run(capsys, "run", str(DEMO), "--batch", "3", "--input-seed", "7", "--output", str(tmp_path / "out.npz"))
    assert code == 0 and out == f"wrote 1 output(s) to {tmp_path / 'out.npz'}: 12\n"
    saved = np.load(tmp_path / "out.npz")
    assert saved.files == ["12"]
    x = np.random.default_rng(7).standard_normal((3, 3, 64, 64)).astype(np.float32)
    np.testing.assert_array_equal(saved["12"], kuiperinfer.load(DEMO)(x))


def test_run_on_npy_inputs(capsys, tmp_path):
    x = np.random.default_rng(1).standard_normal((2, 3, 64, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    expected = kuiperinfer.load(DEMO)(x)
    for spec in ("pnnx_input_0=", "0=", ""):
        code, _, _ = run(capsys, "run", str(DEMO), "-i", f"{spec}{tmp_path / 'x.npy'}", "-o", str(tmp_path / "o.npz"))
        assert code == 0
        np.testing.assert_array_equal(np.load(tmp_path / "o.npz")["12"], expected)


def test_run_fills_the_inputs_not_given_with_random(capsys, tmp_path, products):
    path = products
    np.save(tmp_path / "y.npy", np.eye(4, dtype=np.float32))
    code, out, _ = run(capsys, "run", str(path), "--input", f"1={tmp_path / 'y.npy'}", "--random")
    assert code == 0
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("output")] == \
        [f"output {name}" for name in kuiperinfer.load(path).output_names]
    code, _, err = run(capsys, "run", str(path), "--input", f"1={tmp_path / 'y.npy'}")
    assert code == 2 and "missing input(s) ['pnnx_input_0']" in err


@pytest.mark.parametrize("argv, message", [
    (["-i", "nowhere.npy"], "--input 'nowhere.npy': no such file 'nowhere.npy'"),
    (["-i", "other={npy}"], "the model has no input 'other'; its inputs are ['pnnx_input_0']"),
    (["-i", "{text}"], "cannot read"),
    (["-i", "{npy}", "--batch", "2"], "--batch sets the batch size of random inputs"),
    (["-i", "{small}"], "input 'pnnx_input_0' has shape (1, 3, 8, 8), the model expects (1,3,64,64)"),
])
def test_run_errors_are_one_line_and_exit_2(capsys, tmp_path, argv, message):
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 64, 64), np.float32))
    np.save(tmp_path / "small.npy", np.zeros((1, 3, 8, 8), np.float32))
    (tmp_path / "x.txt").write_text("not an array")
    files = dict(npy=tmp_path / "x.npy", small=tmp_path / "small.npy", text=tmp_path / "x.txt")
    code, out, err = run(capsys, "run", str(DEMO), *[a.format(**files) for a in argv])
    assert code == 2 and out == ""
    assert err.startswith("kuiper run: error: ") and message in err and len(err.splitlines()) == 1


def test_run_refuses_a_bad_batch(capsys):
    assert "must be at least 1, got 0" in usage_error(capsys, "run", "--batch", "0")


# -- help and the installed script -------------------------------------------------------

@pytest.mark.parametrize("command", ["info", "check", "run", "profile", "bench", "graph"])
def test_every_command_explains_itself(capsys, command):
    with pytest.raises(SystemExit) as exit_info:
        kuiper([command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: kuiper {command} ") and "Examples:\n  kuiper " + command in out
    with pytest.raises(SystemExit):
        kuiper(["--help"])
    summary = capsys.readouterr().out
    assert re.search(rf"^    {command} +\S", summary, re.M)       # listed with its one-line help


def test_the_installed_kuiper_script(tmp_path):
    script = shutil.which("kuiper", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                          os.environ.get("PATH", "")]))
    if script is None:
        pytest.skip("the kuiper script is not installed (pip install -e .)")
    result = subprocess.run([script, "info", str(DEMO)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "compute:    852K MACs" in result.stdout
    result = subprocess.run([script, "check", str(tmp_path / "absent.pnnx.param")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == f"kuiper check: error: no such model file: {tmp_path / 'absent.pnnx.param'}\n"


def test_run_in_bf16_says_how_this_machine_computes_it(capsys, tmp_path):
    x = np.random.default_rng(3).standard_normal((2, 3, 64, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    code, _, err = run(capsys, "run", str(DEMO), "-i", str(tmp_path / "x.npy"), "-o", str(tmp_path / "o.npz"),
                       "--precision", "bf16")
    assert code == 0
    assert err == f"precision bf16: {kuiperinfer.load(DEMO, precision='bf16').precision.products}\n"
    ours = np.load(tmp_path / "o.npz")["12"]
    np.testing.assert_allclose(ours, kuiperinfer.load(DEMO, precision="bf16", kernels="reference")(x), atol=1e-6)
    assert not np.array_equal(ours, kuiperinfer.load(DEMO)(x))   # the products' inputs were rounded


@pytest.mark.parametrize("command", ["run", "bench", "profile", "classify"])
def test_int8_needs_a_calibration_table(capsys, command):
    code, _, err = run(capsys, command, "--precision", "int8", *(["--model", str(DEMO)] if command == "classify"
                                                                 else [str(DEMO)]))
    assert code == 2 and "'int8' needs a calibration table" in err and len(err.splitlines()) == 1
