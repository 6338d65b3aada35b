"""RuntimeGraph: states, execution order, inputs and outputs, errors, threads, the run_node hook."""

import threading
import weakref

import handmade
import numpy as np
import pytest

import kuiperinfer
from kuiperinfer.errors import GraphError, InferError, InputError, KuiperError, UnknownOperatorError, WeightError
from kuiperinfer.pnnx import Attribute
from kuiperinfer.profiler import ProfilingGraph
from kuiperinfer.runtime.attribute import RuntimeAttribute
from kuiperinfer.runtime.graph import GraphState, RuntimeGraph

# Two inputs, an expression, a linear layer with weights in the .bin, a split with two
# outputs feeding a tuple: y = linear(relu(a + b)), then (y[:, :2], y[:, 2:]).
PARAM = """7767517
8 8
pnnx.Input               in_a                     0 1 a #a=(1,4)f32
pnnx.Input               in_b                     0 1 b #b=(1,4)f32
pnnx.Expression          add                      2 1 a b s expr=add(@0,@1) #a=(1,4)f32 #b=(1,4)f32 #s=(1,4)f32
F.relu                   relu                     1 1 s r #s=(1,4)f32 #r=(1,4)f32
nn.Linear                fc                       1 1 r y bias=True in_features=4 out_features=5 @bias=(5)f32 @weight=(5,4)f32 #r=(1,4)f32 #y=(1,5)f32
torch.split              split                    1 2 y p q dim=1 split_size_or_sections=(2,3) #y=(1,5)f32 #p=(1,2)f32 #q=(1,3)f32
prim::TupleConstruct     tuple                    2 1 p q t
pnnx.Output              out                      1 0 t
"""

WEIGHT = np.arange(20, dtype=np.float32).reshape(5, 4) / 10
BIAS = np.array([1, -1, 0.5, 0, 2], dtype=np.float32)


def write_model(directory, param=PARAM, entries=None):
    return handmade.write_model(directory, param, {"fc.weight": WEIGHT, "fc.bias": BIAS} if entries is None
                                else entries)


def reference(a, b):
    y = np.maximum(a + b, 0) @ WEIGHT.T + BIAS
    return y[:, :2], y[:, 2:]


@pytest.fixture
def model_path(tmp_path):
    return write_model(tmp_path)


def test_states_follow_kuiperinfer(model_path):
    graph = RuntimeGraph(model_path)
    assert graph.graph_state == GraphState.NeedInit
    graph.init()
    assert graph.graph_state == GraphState.NeedBuild
    with pytest.raises(GraphError, match="build"):
        graph.run(np.zeros((1, 4)), np.zeros((1, 4)))
    graph.build()
    assert graph.graph_state == GraphState.Complete


def test_runtime_operators_carry_kuiperinfers_fields(model_path):
    graph = kuiperinfer.load(model_path, optimize=False)
    ops = {op.name: op for op in graph.operators}
    add = ops["add"]
    assert [o.name for o in add.input_operands_seq] == ["a", "b"]
    assert [o.producer.name for o in add.input_operands_seq] == ["in_a", "in_b"]
    assert add.output_operators == [ops["relu"]] and add.output_operands[0].consumers == [ops["relu"]]
    fc = ops["fc"]
    assert fc.params["out_features"].value == 5
    assert fc.attribute["weight"].shape == (5, 4)
    np.testing.assert_array_equal(fc.attribute["weight"].get(), WEIGHT)
    assert [o.name for o in ops["split"].output_operands] == ["p", "q"]
    order = [op.name for op in graph.operators]
    assert order.index("add") < order.index("relu") < order.index("fc") < order.index("split")


def test_run_positional_named_and_call(model_path):
    graph = kuiperinfer.load(model_path)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    expected = reference(a, b)
    for outputs in (graph.run(a, b), graph.run(in_b=b, in_a=a), graph.run({"a": a, "b": b}), graph(a, b)):
        assert len(outputs) == 2
        for ours, ref in zip(outputs, expected):
            np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-6)
    assert graph.input_names == ["in_a", "in_b"]
    assert graph.output_names == ["p", "q"]


def test_topological_order_does_not_depend_on_file_order(model_path):
    graph = RuntimeGraph(model_path)
    graph.init()
    graph.operators.reverse()
    graph.build()
    a = b = np.ones((1, 4), np.float32)
    for ours, ref in zip(graph.run(a, b), reference(a, b)):
        np.testing.assert_allclose(ours, ref, rtol=1e-6)


def test_input_errors_name_the_input_and_both_shapes(model_path):
    graph = kuiperinfer.load(model_path)
    ok = np.zeros((1, 4), np.float32)
    with pytest.raises(InputError, match=r"'in_b' has shape \(1, 5\), the model expects \(1,4\)"):
        graph.run(ok, np.zeros((1, 5)))
    with pytest.raises(InputError, match="takes 2 input"):
        graph.run(ok, ok, ok)
    with pytest.raises(InputError, match="missing input"):
        graph.run(ok)
    with pytest.raises(InputError, match="unknown input 'c'"):
        graph.run(in_a=ok, c=ok)
    with pytest.raises(InputError, match="non-numeric"):
        graph.run(ok, np.array([["x"] * 4]))
    with pytest.raises(InputError, match="batch size 0"):
        graph.run(np.zeros((0, 4)), np.zeros((0, 4)))


def test_inputs_are_converted_and_never_modified(model_path):
    graph = kuiperinfer.load(model_path)
    a = np.linspace(-1, 1, 8).reshape(2, 4)            # float64
    b = np.arange(8, dtype=np.int32).reshape(2, 4)      # int
    a_copy, b_copy = a.copy(), b.copy()
    outputs = graph.run(a, b)
    assert all(o.dtype == np.float32 for o in outputs)
    np.testing.assert_array_equal(a, a_copy)
    np.testing.assert_array_equal(b, b_copy)


def test_intermediate_values_fetched_by_operand_or_operator_name(model_path):
    graph = kuiperinfer.load(model_path, optimize=False)
    a, b = np.full((2, 4), 0.5, np.float32), np.array([[-1, 0, 1, 2]] * 2, np.float32)
    values = graph.run(a, b, fetch=["s", "relu", "split", "in_a"])
    assert list(values) == ["s", "relu", "split", "in_a"]
    np.testing.assert_array_equal(values["s"], a + b)
    np.testing.assert_array_equal(values["relu"], np.maximum(a + b, 0))
    for ours, ref in zip(values["split"], reference(a, b)):
        np.testing.assert_allclose(ours, ref, rtol=1e-6)
    np.testing.assert_array_equal(values["in_a"], a)
    assert graph.run(a, b, fetch="fc")["fc"].shape == (2, 5)
    assert set(graph.value_names) >= {"s", "r", "relu", "fc"}


def test_fetching_a_value_the_optimiser_merged_says_how_to_get_it(model_path):
    graph = kuiperinfer.load(model_path)
    assert "s" not in graph.value_names and "relu" not in graph.value_names   # the ReLU went into the addition
    with pytest.raises(GraphError, match="no operand or operator 's'.*optimize=False"):
        graph.run(np.ones((1, 4)), np.ones((1, 4)), fetch=["s"])
    np.testing.assert_array_equal(graph.run(np.ones((1, 4)), -np.ones((1, 4)), fetch="r")["r"], np.zeros((1, 4)))


def test_run_node_hook_sees_every_operator_in_order(model_path):
    seen = []

    class Tracing(RuntimeGraph):
        def run_node(self, op, inputs):
            seen.append(op.name)
            return super().run_node(op, inputs)

    graph = Tracing(model_path)
    graph.build()
    graph.run(np.ones((1, 4)), np.ones((1, 4)))
    assert seen == [op.name for op in graph.operators if op.layer is not None]


class Counting(RuntimeGraph):
    """Counts the operators it runs."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ran = 0

    def run_node(self, op, inputs):
        self.ran += 1
        return super().run_node(op, inputs)


def test_load_warms_up_on_zeros_of_the_declared_shapes_unless_told_not_to(model_path):
    warm = kuiperinfer.load(model_path, graph_class=Counting)
    cold = kuiperinfer.load(model_path, graph_class=Counting, warmup=False)
    assert (warm.ran, cold.ran) == (len(warm._plan), 0) and warm.ran > 0
    a, b = np.ones((3, 4)), np.full((3, 4), -0.5)
    for got, want in zip(warm.run(a, b), cold.run(a, b)):
        np.testing.assert_array_equal(got, want)


def test_warm_up_takes_an_open_size_as_1_and_needs_a_built_graph(tmp_path):
    graph = Counting(write_model(tmp_path, PARAM.replace("#a=(1,4)f32", "#a=(?,4)f32")))
    with pytest.raises(GraphError, match="build"):
        graph.warm_up()
    graph.build()
    assert graph.warm_up() is True and graph.ran == len(graph._plan)


def test_warm_up_is_skipped_when_the_graph_cannot_run_with_an_open_size_as_1(tmp_path):
    param = PARAM
    for name in "absr":
        param = param.replace(f"#{name}=(1,4)f32", f"#{name}=(1,?)f32")
    graph = Counting(write_model(tmp_path, param))
    graph.build()
    assert graph.warm_up() is False              # the Linear needs 4 features, not 1
    a, b = np.ones((1, 4), np.float32), np.full((1, 4), -0.5, np.float32)
    for got, want in zip(graph.run(a, b), reference(a, b)):
        np.testing.assert_allclose(got, want, atol=1e-6)


def test_warm_up_is_not_profiled(model_path):
    graph = kuiperinfer.load(model_path, graph_class=ProfilingGraph)
    assert graph.runs == []
    assert graph.warm_up() is True and graph.runs == []


def test_intermediate_values_are_freed_after_their_last_use(model_path):
    made, live = {}, {}

    class Watching(RuntimeGraph):
        def run_node(self, op, inputs):
            live[op.name] = sorted(name for name, value in made.items() if value() is not None)
            outputs = super().run_node(op, inputs)
            made.update((o.name, weakref.ref(v)) for o, v in zip(op.output_operands, outputs)
                        if isinstance(v, np.ndarray))
            return outputs

    graph = Watching(model_path)
    graph.build()
    graph.run(np.ones((1, 4)), np.ones((1, 4)))
    assert live["fc"] == ["r"] and live["split"] == ["y"]
    assert all(value() is None for value in made.values())   # the run kept nothing


def test_one_graph_serves_many_threads(model_path):
    graph = kuiperinfer.load(model_path)
    rng = np.random.default_rng(1)
    cases = [(rng.standard_normal((2, 4)).astype(np.float32), rng.standard_normal((2, 4)).astype(np.float32))
             for _ in range(8)]
    expected = [graph.run(a, b) for a, b in cases]
    failures = []

    def worker(i):
        for _ in range(30):
            got = graph.run(*cases[i])
            if not all(np.array_equal(x, y) for x, y in zip(got, expected[i])):
                failures.append(i)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_layer_weights_are_read_only_views_of_the_model_file(model_path):
    graph = kuiperinfer.load(model_path)
    fc = next(op for op in graph.operators if op.name == "fc")
    weight = fc.layer.weights()
    assert np.shares_memory(weight, fc.attribute["weight"].attribute.numpy())
    assert not weight.flags.writeable
    np.testing.assert_array_equal(weight, WEIGHT)
    fc.layer.set_weights(WEIGHT * 2)                  # replacing them is how weights change
    a, b = np.ones((1, 4), np.float32), np.zeros((1, 4), np.float32)
    y = np.concatenate(graph(a, b), axis=1)
    np.testing.assert_allclose(y, np.maximum(a + b, 0) @ (2 * WEIGHT).T + BIAS, rtol=1e-6)
    np.testing.assert_array_equal(fc.attribute["weight"].attribute.numpy(), WEIGHT)


def test_runtime_attribute_copies_unless_told_not_to_and_never_hands_out_writable_shared_data():
    stored = RuntimeAttribute(Attribute.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3)))
    copied = stored.get()
    assert copied.flags.writeable and not np.shares_memory(copied, stored.attribute.numpy())
    view = stored.get(copy=False)
    assert np.shares_memory(view, stored.attribute.numpy()) and not view.flags.writeable
    decoded = stored.get(np.float64, copy=False)                # another type: a read-only copy
    assert decoded.dtype == np.float64 and not decoded.flags.writeable
    np.testing.assert_array_equal(decoded, copied)


def test_unknown_operator_lists_the_closest_types(tmp_path):
    path = write_model(tmp_path, PARAM.replace("F.relu                  ", "F.Relu                  "))
    with pytest.raises(UnknownOperatorError) as info:
        kuiperinfer.load(path)
    assert "'relu'" in str(info.value) and "F.Relu" in str(info.value)
    assert "F.relu" in info.value.suggestions


def test_missing_and_wrong_sized_weights_name_operator_and_attribute(tmp_path):
    with pytest.raises(KuiperError, match="fc.*weight"):
        kuiperinfer.load(write_model(tmp_path, entries={"fc.bias": BIAS}))
    bad = PARAM.replace("@weight=(5,4)f32", "@weight=(4,5)f32")
    with pytest.raises(WeightError, match=r"'fc'.*'weight'.*\(4, 5\).*\(5, 4\)"):
        kuiperinfer.load(write_model(tmp_path, bad, {"fc.weight": WEIGHT, "fc.bias": BIAS}))


def test_layer_failure_at_run_time_names_the_operator(tmp_path):
    bad = PARAM.replace("split_size_or_sections=(2,3)", "split_size_or_sections=(2,2)")
    graph = kuiperinfer.load(write_model(tmp_path, bad), warmup=False)
    with pytest.raises(InferError, match="'split' \\(torch.split\\)"):
        graph.run(np.ones((1, 4)), np.ones((1, 4)))


def test_tensor_size_limit_is_configurable_from_load(model_path):
    with pytest.raises(KuiperError, match="fc"):
        kuiperinfer.load(model_path, max_tensor_bytes=64)
    assert kuiperinfer.load(model_path, max_tensor_bytes=1024).graph_state == GraphState.Complete


def test_expression_failure_at_run_time_names_the_operator(tmp_path):
    bad = PARAM.replace("expr=add(@0,@1)", "expr=lshift(@0,@1)")
    graph = kuiperinfer.load(write_model(tmp_path, bad), warmup=False)
    with pytest.raises(InferError, match="'add' \\(pnnx.Expression\\)"):
        graph.run(np.ones((1, 4)), np.ones((1, 4)))
