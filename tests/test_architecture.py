"""The package's import arrows run one way: kernels at the bottom, the CLI at the top, and no
module imports one that imports it back, not even inside a function."""

import textwrap

from tools.import_graph import PACKAGE, cycles, import_graph, layering, module_graph


def test_the_package_has_no_import_cycle():
    order = layering(import_graph())
    assert order.index("kernels") < order.index("runtime") < order.index("layers") < order.index("optimizer")
    assert order.index("cli") == len(order) - 1


def test_no_module_imports_one_that_imports_it_back():
    assert cycles(module_graph()) == []


def test_the_pnnx_modules_are_layered():
    graph = module_graph()
    order = ["dtypes", "ir", "param_file", "storezip", "loading"]
    for i, name in enumerate(order):
        imported = {m.rpartition(".")[2] for m in graph[f"kuiperinfer.pnnx.{name}"] if m.startswith("kuiperinfer.pnnx.")}
        assert imported <= set(order[:i]), name


def test_kernels_are_the_ground_floor_and_the_runtime_knows_no_layer():
    graph = import_graph()
    assert graph["kernels"] <= {"errors", "settings"}
    assert graph["settings"] == set()
    assert not graph["runtime"] & {"layers", "inspect", "optimizer", "expression", "cli"}
    assert not graph["layers"] & {"optimizer", "inspect", "cli"}


def write(root, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_the_check_sees_cycles_that_imports_inside_functions_hide(tmp_path):
    package = tmp_path / PACKAGE.name
    write(package, {
        "__init__.py": "",
        "part/__init__.py": "from kuiperinfer.part.low import Low\nfrom kuiperinfer.part.user import use\n",
        "part/low.py": """
            class Low:
                def save(self):
                    from kuiperinfer.part import high   # deferred: Python never sees the cycle
                    return high.save(self)
            """,
        "part/high.py": "from kuiperinfer.part.low import Low\n",
        "part/user.py": "from kuiperinfer.part import Low\nuse = Low\n",   # a name of the __init__ that imports it
        "part/relative.py": "from . import user\nfrom .low import Low\n",
        "part/checked.py": """
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from kuiperinfer.part.typed import Typed
            """,
        "part/typed.py": "import kuiperinfer.part.checked\n",
        "other.py": "from kuiperinfer import part\n",
    })
    graph = module_graph(package)
    assert graph["kuiperinfer.part.low"] == {"kuiperinfer.part.high"}
    assert graph["kuiperinfer.part.relative"] == {"kuiperinfer.part.user", "kuiperinfer.part.low"}
    assert graph["kuiperinfer.other"] == {"kuiperinfer.part"}
    assert cycles(graph) == [
        ["kuiperinfer.part", "kuiperinfer.part.user"],
        ["kuiperinfer.part.checked", "kuiperinfer.part.typed"],
        ["kuiperinfer.part.high", "kuiperinfer.part.low"],
    ]
