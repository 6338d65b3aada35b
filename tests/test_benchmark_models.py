"""The benchmark's models: named inputs per batch, and exports with those names and a dynamic batch."""

import numpy as np
import onnx
import onnxruntime
import torch

import kuiperinfer
from benchmarks.engines import onnx_file, pnnx_file
from benchmarks.models import MODELS, BenchModel, InputSpec
from benchmarks.networks import SentenceEncoder


def test_images_are_float32_batches():
    inputs = MODELS["vit_tiny"].sample_inputs(8)
    assert list(inputs) == ["input"]
    assert inputs["input"].shape == (8, 3, 224, 224) and inputs["input"].dtype == np.float32


def test_token_ids_and_attention_mask_are_int64_and_reproducible():
    model = MODELS["minilm"]
    inputs = model.sample_inputs(8)
    assert list(inputs) == ["input_ids", "attention_mask"]
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    assert ids.shape == mask.shape == (8, 32) and ids.dtype == mask.dtype == np.int64
    assert 0 <= ids.min() and ids.max() < 30522
    assert set(np.unique(mask)) == {0, 1}
    assert mask[0].all() and not mask.all()                          # sample 0 unpadded, some padded
    assert (np.diff(mask, axis=1) <= 0).all()                        # ones, then zeros
    np.testing.assert_array_equal(ids, model.sample_inputs(8)["input_ids"])
    assert model.sample_inputs(1)["attention_mask"].all()


def tiny_encoder() -> torch.nn.Module:
    torch.manual_seed(0)
    return SentenceEncoder(vocab=50, length=6, dim=16, depth=1, heads=2, hidden=32)


TINY = BenchModel("tiny_encoder", tiny_encoder,
                  (InputSpec("input_ids", (6,), "ids", high=50), InputSpec("attention_mask", (6,), "mask")),
                  (1,), dynamic=True)


def test_exports_name_the_inputs_and_run_at_another_batch(tmp_path):
    inputs = TINY.sample_inputs(3)
    with torch.no_grad():
        expected = TINY.module()(*(torch.from_numpy(x) for x in inputs.values())).numpy()
    onnx_path = onnx_file(TINY, tmp_path)
    graph = onnx.load(str(onnx_path)).graph
    assert [i.name for i in graph.input] == ["input_ids", "attention_mask"]
    assert all(i.type.tensor_type.shape.dim[0].dim_param == "batch" for i in graph.input)
    session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, inputs)[0], expected, atol=1e-5)
    ours = kuiperinfer.load(pnnx_file(TINY, tmp_path)).run(*inputs.values())[0]
    np.testing.assert_allclose(ours, expected, atol=1e-5)
