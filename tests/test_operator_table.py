"""docs/operators.md is what tools/operator_table.py renders from pnnx's list of operator types
and the layer registry, so that it cannot drift from the code."""

from tools import operator_table, pnnx_operator_types


def test_the_committed_table_is_the_rendered_one(capsys):
    rendered = operator_table.render()
    assert operator_table.TABLE_FILE.read_text() == rendered, "docs/operators.md is out of date: run python -m tools.operator_table"
    counts = operator_table.counts()
    with capsys.disabled():
        print(f"\npnnx operator types: {sum(counts.values())}: "
              + ", ".join(f"{counts[s]} {s}" for s in operator_table.STATUSES))


def test_every_listed_type_is_described_once():
    types = operator_table.read_types()
    assert len(types) > 250
    names = [t.name for t in types]
    assert len(set(names)) == len(names)
    assert {"nn.Conv2d", "F.conv2d", "torch.gather", "Tensor.index", "pnnx.Expression", "prim::TupleUnpack"} <= set(names)


def test_refused_types_carry_their_reason():
    rows = {t.name: operator_table.status(t) for t in operator_table.read_types()}
    state, layer, reason = rows["nn.quantized.Conv2d"]
    assert state == "refused" and "export the float model" in reason and layer == "`quantized.Quantized`"
    assert rows["torch.gather"][0] == "runs"
    assert rows["nn.Dropout"][0] == "removed by pnnx"
    assert rows["pnnx.Input"][0] == "runs"


def test_the_check_option(tmp_path, monkeypatch, capsys):
    assert operator_table.main(["--check"]) == 0
    stale = tmp_path / "operators.md"
    stale.write_text("old\n")
    monkeypatch.setattr(operator_table, "TABLE_FILE", stale)
    monkeypatch.setattr(operator_table, "ROOT", tmp_path)
    assert operator_table.main(["--check"]) == 1
    assert "out of date" in capsys.readouterr().err


def test_the_installed_pnnx_holds_the_listed_types():
    """The list came from pnnx's sources; the installed exporter's strings agree with it."""
    found = {s.decode() for s in pnnx_operator_types.strings(pnnx_operator_types.installed_pnnx())}
    types = [t.name for t in operator_table.read_types()]
    # a few names are only the tail of a longer string (the compiler merges them), e.g. "tnn.ReLU"
    absent = [t for t in types if t not in found and not any(s.endswith(t) for s in found)]
    assert not absent
