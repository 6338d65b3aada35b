"""docs/operators.md is what tools/operator_table.py renders from pnnx's list of operator types
and the layer registry, so that it cannot drift from the code."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def load_tool(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def table():
    return load_tool("operator_table")


def test_the_committed_table_is_the_rendered_one(table, capsys):
    rendered = table.render()
    assert table.TABLE_FILE.read_text() == rendered, "docs/operators.md is out of date: run python tools/operator_table.py"
    counts = table.counts()
    with capsys.disabled():
        print(f"\npnnx operator types: {sum(counts.values())}: "
              + ", ".join(f"{counts[s]} {s}" for s in table.STATUSES))


def test_every_listed_type_is_described_once(table):
    types = table.read_types()
    assert len(types) > 250
    names = [t.name for t in types]
    assert len(set(names)) == len(names)
    assert {"nn.Conv2d", "F.conv2d", "torch.gather", "Tensor.index", "pnnx.Expression", "prim::TupleUnpack"} <= set(names)


def test_refused_types_carry_their_reason(table):
    rows = {t.name: table.status(t) for t in table.read_types()}
    state, layer, reason = rows["nn.quantized.Conv2d"]
    assert state == "refused" and "export the float model" in reason and layer == "`quantized.Quantized`"
    assert rows["torch.gather"][0] == "runs"
    assert rows["nn.Dropout"][0] == "removed by pnnx"
    assert rows["pnnx.Input"][0] == "runs"


def test_the_check_option(table, tmp_path, monkeypatch, capsys):
    assert table.main(["--check"]) == 0
    stale = tmp_path / "operators.md"
    stale.write_text("old\n")
    monkeypatch.setattr(table, "TABLE_FILE", stale)
    monkeypatch.setattr(table, "ROOT", tmp_path)
    assert table.main(["--check"]) == 1
    assert "out of date" in capsys.readouterr().err


def test_the_installed_pnnx_holds_the_listed_types():
    """The list came from pnnx's sources; the installed exporter's strings agree with it."""
    tool = load_tool("pnnx_operator_types")
    found = {s.decode() for s in tool.strings(tool.installed_pnnx())}
    types = [t.name for t in load_tool("operator_table").read_types()]
    # a few names are only the tail of a longer string (the compiler merges them), e.g. "tnn.ReLU"
    absent = [t for t in types if t not in found and not any(s.endswith(t) for s in found)]
    assert not absent
