"""kuiperinfer/runtime/options.py: one frozen, validated object for the load options, its
defaults resolved once, and the build options each layer receives."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import kuiperinfer
from kuiperinfer.errors import OptionError
from kuiperinfer.kernels.parallel import ThreadPool, cores
from kuiperinfer.layers.base import Layer
from kuiperinfer.runtime.options import BuildOptions, LoadOptions
from kuiperinfer.runtime.registry import LayerRegisterer

DEMO = Path(__file__).parent / "data" / "demo_cnn" / "demo_cnn.pnnx.param"


def test_defaults_are_resolved_once_from_the_cpus_this_process_may_use():
    options = LoadOptions()
    assert (options.threads, options.spin, options.pin, options.precision, options.optimize) == \
        (cores(), "auto", "auto", "fp32", True)
    assert LoadOptions(threads=3).threads == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.threads = 1


@pytest.mark.parametrize("values, message", [
    ({"threads": 0}, "threads must be a whole number of at least 1"),
    ({"threads": 1.5}, "threads must be a whole number"),
    ({"threads": True}, "threads must be a whole number"),
    ({"kernels": "fast"}, "kernels must be one of 'compiled', 'reference'"),
    ({"precision": "fp16"}, "precision must be one of 'fp32', 'bf16', 'int8'"),
    ({"spin": "sometimes"}, "spin must be one of"),
    ({"pin": "yes"}, "pin must be one of"),
    ({"optimize": "yes"}, "optimize must be True or False"),
    ({"seed": 0.5}, "seed must be a whole number"),
    ({"max_tensor_bytes": 0}, "max_tensor_bytes must be"),
    ({"precision": "int8"}, "precision 'int8' needs a calibration table"),
    ({"calibration": "table.txt"}, "a calibration table is for precision 'int8', not 'fp32'"),
    ({"pool": "mine"}, "pool must be a ThreadPool"),
])
def test_a_bad_option_is_an_option_error_saying_which(values, message):
    with pytest.raises(OptionError, match=message):
        LoadOptions(**values)
    with pytest.raises(OptionError, match=message):   # the same from load, before the model is read
        kuiperinfer.load(DEMO, **values)


def test_a_pool_brings_its_threads_and_spin_and_contradicting_them_is_refused():
    pool = ThreadPool(2, "never")
    options = LoadOptions(pool=pool)
    assert (options.threads, options.spin) == (2, "never")
    assert LoadOptions(pool=pool, threads=2, spin="never").pool is pool   # saying the same is fine
    with pytest.raises(OptionError, match="spin='always' with a pool whose spin is 'never'"):
        LoadOptions(pool=pool, spin="always")
    with pytest.raises(OptionError, match="threads=3 with a pool whose threads is 2"):
        kuiperinfer.load(DEMO, pool=pool, threads=3)
    with pytest.raises(OptionError, match="pin='never' with a pool whose pin is 'auto'"):
        LoadOptions(pool=pool, pin="never")


def test_of_replaces_fields_and_a_new_pool_replaces_the_threads_it_brings():
    base = LoadOptions(threads=1, precision="bf16")
    assert LoadOptions.of(base, optimize=False) == dataclasses.replace(base, optimize=False)
    pool = ThreadPool(2)
    assert LoadOptions.of(base, pool=pool).threads == 2
    with pytest.raises(OptionError, match="unknown load option.*'treads'"):
        LoadOptions.of(base, treads=2)


def test_the_earlier_spelling_workers_still_works_and_warns():
    with pytest.warns(DeprecationWarning, match="'workers' is now called 'threads'"):
        graph = kuiperinfer.load(DEMO, workers=1)
    assert graph.threads == 1 and graph.options.threads == 1
    with pytest.raises(OptionError, match="give 'threads' only"), pytest.warns(DeprecationWarning):
        kuiperinfer.load(DEMO, workers=1, threads=2)


def test_load_takes_one_options_object_and_keywords_replace_its_fields():
    options = LoadOptions(threads=1, optimize=False, warmup=False)
    graph = kuiperinfer.load(DEMO, options=options, kernels="reference")
    assert graph.options == dataclasses.replace(options, kernels="reference")
    assert all(op.plan is None for op in graph.operators)   # optimize=False reached the optimiser
    x = np.random.default_rng(0).standard_normal((2, *graph.input_shapes[0][1:])).astype(np.float32)
    np.testing.assert_allclose(graph(x), kuiperinfer.load(DEMO, threads=1)(x), rtol=1e-5, atol=1e-6)


def test_every_layer_receives_the_graphs_build_options(monkeypatch):
    """ncnn's Option reaching create_pipeline: one object, the graph's, for every layer."""
    seen = []
    create = LayerRegisterer.create_layer.__func__

    def recording(cls, op, options=None):
        seen.append(options)
        return create(cls, op, options)

    monkeypatch.setattr(LayerRegisterer, "create_layer", classmethod(recording))
    graph = kuiperinfer.load(DEMO, kernels="reference", seed=7, precision="bf16", threads=1)
    assert seen and all(options == BuildOptions("reference", 7, graph.precision, None) for options in seen)


def test_build_options_give_each_product_its_precision():
    bf16 = LoadOptions(precision="bf16").build()
    assert bf16.precision_of("conv1").name == "bf16"
    assert LoadOptions().build().precision_of("conv1").name == "fp32"
    assert BuildOptions().compiled is False and LoadOptions(kernels="compiled").build().kernels in ("compiled",
                                                                                                   "reference")


def test_layers_take_the_options_in_create():
    """Every registered layer class's create takes (op, options), as the registry calls it."""
    import inspect

    for layer_type in LayerRegisterer.layer_types():
        layer_class = LayerRegisterer.layer_class(layer_type)
        assert issubclass(layer_class, Layer), layer_type
        parameters = list(inspect.signature(layer_class.create).parameters)
        assert parameters[:2] == ["op", "options"], (layer_type, parameters)
