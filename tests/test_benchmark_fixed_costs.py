"""benchmarks/fixed_costs.py: the cost of a run and of an operator, on chains of tiny operators."""

from __future__ import annotations

import json

from benchmarks.fixed_costs import CASES, LENGTH, chain, main


def test_chains_read_one_another():
    ops = chain("add", 3)
    assert [op[0] for op in ops] == ["op0", "op1", "op2"]
    assert [op[3] for op in ops] == [["x", "x"], ["op0", "op0"], ["op1", "op1"]]


def test_every_case_is_measured(capsys):
    assert main(["--rounds", "1", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["case"] for row in rows] == list(CASES)
    assert all(row["us_per_run"] > 0 for row in rows)
    assert all(row["operators"] == (1 if row["case"].startswith("one ") else LENGTH) for row in rows)
    assert all(abs(row["us_per_operator"] * row["operators"] - row["us_per_run"]) < 1e-6 for row in rows)
