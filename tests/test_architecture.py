"""The package's import arrows run one way: kernels at the bottom, the CLI at the top."""

from tools.import_graph import import_graph, layering


def test_the_package_has_no_import_cycle():
    order = layering(import_graph())
    assert order.index("kernels") < order.index("runtime") < order.index("layers") < order.index("optimizer")
    assert order.index("cli") == len(order) - 1


def test_kernels_are_the_ground_floor_and_the_runtime_knows_no_layer():
    graph = import_graph()
    assert graph["kernels"] <= {"errors", "settings"}
    assert graph["settings"] == set()
    assert not graph["runtime"] & {"layers", "inspect", "optimizer", "expression", "cli"}
    assert not graph["layers"] & {"optimizer", "inspect", "cli"}
