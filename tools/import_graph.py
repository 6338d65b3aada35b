"""Print which part of the kuiperinfer package imports which, and any cycle among them or
among its modules.

The parts are the subpackages (``runtime``, ``layers``, ...) and the top-level modules
(``tensor``, ``errors``, ...); ``kuiperinfer`` is the package's own ``__init__``. Every
import counts, also those inside functions and under ``TYPE_CHECKING``: an import deferred
into a function still makes its module depend on the other, it only hides the cycle from
Python until the function runs.

    python -m tools.import_graph            # the graph, parts in layering order
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "kuiperinfer"


def part_of(module: str) -> str:
    """The part a dotted ``kuiperinfer...`` module name belongs to."""
    names = module.split(".")
    return names[1] if len(names) > 1 else names[0]


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package by its dotted name (a subpackage by its ``__init__``)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        names = (package.name, *path.relative_to(package).with_suffix("").parts)
        found[".".join(names[:-1] if names[-1] == "__init__" else names)] = path
    return found


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: dict) -> list[str]:
    """The modules of the package that one import statement in ``module`` names."""
    def within(name: str) -> str | None:   # the module itself, or the package that defines the name
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    if isinstance(node, ast.Import):
        return [within(alias.name) for alias in node.names]
    base = node.module or ""
    if node.level:   # relative: counted from the package that holds ``module``
        package = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else within(base) for alias in node.names]


def module_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Each module of the package and the other modules of the package it imports."""
    known = modules(package)
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        graph[module] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                targets = _imported(node, module, path.name == "__init__.py", known)
                graph[module].update(t for t in targets if t is not None and t != module)
    return graph


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Each part and the other parts it imports."""
    graph: dict[str, set[str]] = defaultdict(set)
    for module, targets in module_graph(package).items():
        source = part_of(module)
        graph[source].update(part_of(t) for t in targets if part_of(t) != source)
    return dict(graph)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The sets of nodes that reach each other (strongly connected components larger than
    one), each sorted, one cycle of imports or several entangled; empty when there is none."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:   # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def layering(graph: dict[str, set[str]]) -> list[str]:
    """The parts, each after everything it imports (raises graphlib.CycleError on a cycle)."""
    return list(TopologicalSorter(graph).static_order())


def main() -> int:
    graph = import_graph()
    try:
        order = layering(graph)
    except CycleError as error:
        print(f"cycle: {' -> '.join(error.args[1])}")
        return 1
    for part in order:
        print(f"{part:<12} -> {', '.join(sorted(graph[part], key=order.index)) or '(nothing)'}")
    entangled = cycles(module_graph())
    for component in entangled:
        print(f"modules importing each other: {', '.join(component)}")
    return 1 if entangled else 0


if __name__ == "__main__":
    sys.exit(main())
