"""Print which part of the kuiperinfer package imports which, and any cycle among them.

The parts are the subpackages (``runtime``, ``layers``, ...) and the top-level modules
(``tensor``, ``errors``, ...); ``kuiperinfer`` is the package's own ``__init__``. Every
import counts, also those inside functions and under ``TYPE_CHECKING``.

    python -m tools.import_graph            # the graph, parts in layering order
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "kuiperinfer"


def part_of(module: str) -> str | None:
    """The part a dotted ``kuiperinfer...`` module name belongs to."""
    names = module.split(".")
    if names[0] != "kuiperinfer":
        return None
    return names[1] if len(names) > 1 else "kuiperinfer"


def parts(package: Path = PACKAGE) -> set[str]:
    """The subpackages and top-level modules."""
    return {p.stem for p in package.iterdir() if p.suffix == ".py" and p.stem != "__init__"} | \
        {p.name for p in package.iterdir() if (p / "__init__.py").exists()}


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Each part and the other parts it imports."""
    known = parts(package)
    graph: dict[str, set[str]] = defaultdict(set)
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).with_suffix("").parts
        source = "kuiperinfer" if relative == ("__init__",) else relative[0]
        graph[source]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [part_of(alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module == "kuiperinfer":   # a part, or a name the package's __init__ defines
                    targets = [alias.name if alias.name in known else "kuiperinfer" for alias in node.names]
                else:
                    targets = [part_of(node.module)]
            else:
                continue
            graph[source].update(t for t in targets if t is not None and t != source)
    return dict(graph)


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
    return 0


if __name__ == "__main__":
    sys.exit(main())
